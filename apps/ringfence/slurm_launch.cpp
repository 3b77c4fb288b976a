#include "apps/ringfence/slurm_launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "elastic/slurm.h"
#include "elastic/token.h"

extern char** environ;

namespace rf::apps {

using namespace rf::elastic;

namespace {

constexpr auto kScontrolBound = std::chrono::seconds(20);  // slurmctld answers in ms when it is up

// `scontrol ARGS...`'s standard output; throws rf::Error with its status and what it said.
std::string scontrol(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"scontrol"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::string what = "`scontrol";
  for (const auto& a : args) what += " " + a;
  what += "`";
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw rf::Error(what + ": pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, "scontrol", &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    throw rf::Error(what + ": cannot run it: " + std::strerror(rc) + " (is Slurm's client installed here?)");
  }
  std::string text;
  const TimePoint deadline = Clock::now() + kScontrolBound;
  bool timed_out = false;
  char buf[4096];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{out[0], POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) == 0) {
      timed_out = true;
      break;
    }
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) throw rf::Error(rf::str(what, " did not answer within ", kScontrolBound.count(), " s"));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw rf::Error(rf::str(what, " failed (status ", status, ")"));
  return text;
}

// Where the other nodes reach `node`: its NodeAddr, as Slurm itself reaches it.
std::string node_addr(const std::string& node) {
  std::istringstream in(scontrol({"-o", "show", "node", node}));
  std::string field;
  while (in >> field)
    if (field.rfind("NodeAddr=", 0) == 0) return field.substr(9);
  throw rf::Error(rf::str("`scontrol -o show node ", node, "` names no NodeAddr"));
}

std::string first_node(const std::string& nodelist) {
  std::istringstream in(scontrol({"show", "hostnames", nodelist}));
  std::string first;
  if (!(in >> first)) throw rf::Error(rf::str("`scontrol show hostnames ", nodelist, "` names no node"));
  return first;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> split_nul(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t end = text.find('\0', i);
    out.push_back(text.substr(i, end == std::string::npos ? std::string::npos : end - i));
    if (end == std::string::npos) break;
    i = end + 1;
  }
  return out;
}

// The pid of the step's srun where it runs on this node (a batch script's srun runs on the
// job's first node), else "".
std::string local_srun(const SlurmStep& s) {
  std::string host, pid;
  std::istringstream step(scontrol({"-o", "show", "step", s.job_id + "." + s.step_id}));
  for (std::string field; step >> field;)
    if (field.rfind("SrunHost:Pid=", 0) == 0) {
      const std::string v = field.substr(13);
      host = v.substr(0, v.rfind(':'));
      pid = v.substr(v.rfind(':') + 1);
    }
  if (host != s.node_name || pid.empty() || read_file("/proc/" + pid + "/comm") != "srun\n") return "";
  return pid;
}

// The step's srun flags from srun's command line and environment; the cluster's
// KillOnBadExit fills in what they leave open.
SrunFailureFlags srun_flags(const std::string& pid) {
  std::optional<bool> cluster;
  std::istringstream config(scontrol({"show", "config"}));
  for (std::string line; std::getline(config, line);)
    if (line.rfind("KillOnBadExit", 0) == 0) cluster = line.find("= 1") != std::string::npos;
  const char* env_kill = nullptr;
  const std::vector<std::string> env = split_nul(read_file("/proc/" + pid + "/environ"));
  for (const auto& e : env)
    if (e.rfind("SLURM_KILL_BAD_EXIT=", 0) == 0) env_kill = e.c_str() + 20;
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).filename().string();
  return srun_failure_flags(split_nul(read_file("/proc/" + pid + "/cmdline")), self.empty() ? "ringfence" : self,
                            env_kill, cluster);
}

}  // namespace

RunOptions place_under_slurm(const RunOptions& o) {
  const std::optional<SlurmStep> step =
      o.no_slurm ? std::nullopt : read_slurm_step([](const char* name) { return std::getenv(name); });
  if (!step) {
    if (o.spare_nodes > 0) throw rf::InvalidInput("--spare-nodes places spare nodes of a Slurm job step: there is none here");
    if (o.listen_port > 0) throw rf::InvalidInput("--coord-port places the coordinator of a Slurm job step: there is none here");
    check_run_layout(o);
    return o;
  }
  std::string token;
  if (!o.token_file.empty()) token = read_token_file(o.token_file);
  else if (const char* t = std::getenv("RINGFENCE_TOKEN"); t && *t) token = t;
  // Only the nodes that connect to the first one need its address.
  const bool needs_addr = step->node_id != 0 && o.etcd.empty();
  const std::string addr = needs_addr ? node_addr(first_node(step->step_nodes)) : "";
  const std::string srun_pid = step->node_id == 0 ? local_srun(*step) : "";
  const SrunFailureFlags srun = srun_pid.empty() ? SrunFailureFlags{} : srun_flags(srun_pid);
  SlurmPlan plan;
  try {
    plan = plan_slurm(o, *step, addr, srun, token);
  } catch (const rf::InvalidInput&) {
    // A refused task's last output may never reach srun: with -K1 srun ends the step as soon
    // as the task exits, before its output is forwarded. srun runs here, so the refusal goes
    // straight onto srun's own stderr (the batch job's output), appended.
    if (!srun_pid.empty()) {
      const int fd = ::open(("/proc/" + srun_pid + "/fd/2").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
      if (fd >= 0) ::dup2(fd, STDERR_FILENO), ::close(fd);
    }
    throw;
  }
  rf::log::info("run", plan.summary);
  for (const auto& w : plan.warnings) rf::log::warn("run", w);
  plan.options.token = plan.token;
  return plan.options;
}

}  // namespace rf::apps
