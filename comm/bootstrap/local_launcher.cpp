#include "comm/bootstrap/local_launcher.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"

namespace rf::comm {

bool RankExit::ok() const { return !killed_at_deadline && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string RankExit::describe() const {
  std::string s = rf::str("rank ", rank, " (pid ", pid, "): ");
  if (killed_at_deadline) return s + "killed at the deadline";
  if (WIFEXITED(status)) return s + rf::str("exit ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return s + rf::str("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return s + rf::str("status ", status);
}

std::vector<RankExit> run_local_ranks(const LocalLaunch& l) {
  if (l.world < 1) throw rf::InvalidInput(rf::str("run_local_ranks: world size ", l.world));
  namespace fs = std::filesystem;
  std::string store = l.store_dir;
  const bool own_store = store.empty();
  if (own_store) {
    std::string tmpl = (fs::temp_directory_path() / "rf-comm-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw rf::Error(rf::str("mkdtemp: ", std::strerror(errno)));
    store = tmpl;
  }
  // SIGCHLD is blocked so that sigtimedwait() can wait for it without a race.
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &old);

  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (l.bind_to_cores && sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (static_cast<int>(cpus.size()) < l.world) cpus.clear();  // oversubscribed: no binding
  }
  const unsigned alarm_s = static_cast<unsigned>(l.deadline.count() / 1000 + 2);
  std::vector<RankExit> ranks(l.world);
  pid_t group = 0;
  const pid_t parent = getpid();
  for (int r = 0; r < l.world; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw rf::Error(rf::str("fork: ", std::strerror(errno)));
    if (pid == 0) {
      setpgid(0, group);  // rank 0 founds the group, the others join it
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      alarm(alarm_s);
      if (!cpus.empty()) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[r], &one);
        sched_setaffinity(0, sizeof(one), &one);
      }
      setenv("RF_RANK", std::to_string(r).c_str(), 1);
      setenv("RF_WORLD", std::to_string(l.world).c_str(), 1);
      setenv("RF_STORE", store.c_str(), 1);
      for (const auto& [k, v] : l.env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(l.program.c_str()));
      for (const auto& a : l.args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(l.program.c_str(), argv.data());
      _exit(127);
    }
    if (group == 0) group = pid;
    setpgid(pid, group);  // also from here: no window in which a child is outside the group
    ranks[r].rank = r;
    ranks[r].pid = pid;
  }

  const TimePoint deadline = Clock::now() + l.deadline;
  int running = l.world;
  bool killed = false;
  while (running > 0) {
    for (auto& e : ranks) {
      if (e.pid < 0) continue;
      int st = 0;
      const pid_t got = waitpid(e.pid, &st, WNOHANG);
      if (got == e.pid) {
        e.status = st;
        e.pid = -e.pid;  // reaped (keep the number, negated)
        --running;
      }
    }
    if (running == 0) break;
    const auto left = deadline - Clock::now();
    if (left <= Duration::zero()) {
      if (!killed) {
        kill(-group, SIGKILL);
        killed = true;
        for (auto& e : ranks) if (e.pid > 0) e.killed_at_deadline = true;
      }
      // After SIGKILL the children exit promptly; wait for them by PID.
      for (auto& e : ranks) {
        if (e.pid <= 0) continue;
        int st = 0;
        if (waitpid(e.pid, &st, 0) == e.pid) e.status = st;
        e.pid = -e.pid;
        --running;
      }
      break;
    }
    timespec ts{};
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::min<Duration>(left, std::chrono::milliseconds(100))).count();
    ts.tv_sec = static_cast<time_t>(ns / 1000000000);
    ts.tv_nsec = static_cast<long>(ns % 1000000000);
    sigtimedwait(&chld, nullptr, &ts);
  }
  for (auto& e : ranks) e.pid = e.pid < 0 ? -e.pid : e.pid;
  // Any straggler of the group (a grandchild) goes too.
  kill(-group, SIGKILL);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  if (own_store) {
    std::error_code ec;
    fs::remove_all(store, ec);
  }
  return ranks;
}

RankEnv rank_env_from_environment() {
  auto get = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    if (!v || !*v) throw rf::InvalidInput(rf::str("environment variable ", name, " is not set"));
    return v;
  };
  RankEnv e;
  try {
    e.rank = std::stoi(get("RF_RANK"));
    e.world = std::stoi(get("RF_WORLD"));
  } catch (const std::logic_error&) {
    throw rf::InvalidInput("RF_RANK / RF_WORLD must be integers");
  }
  e.store_dir = get("RF_STORE");
  if (e.world < 1 || e.rank < 0 || e.rank >= e.world) {
    throw rf::InvalidInput(rf::str("RF_RANK=", e.rank, " RF_WORLD=", e.world, " is not a rank of the world"));
  }
  return e;
}

}  // namespace rf::comm
