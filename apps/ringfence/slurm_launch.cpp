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

}  // namespace

RunOptions place_under_slurm(const RunOptions& o) {
  const std::optional<SlurmStep> step =
      o.no_slurm ? std::nullopt : read_slurm_step([](const char* name) { return std::getenv(name); });
  if (!step) {
    if (o.spare_nodes > 0) throw rf::InvalidInput("--spare-nodes places spare nodes of a Slurm job step: there is none here");
    if (o.listen_port > 0) throw rf::InvalidInput("--coord-port places the coordinator of a Slurm job step: there is none here");
    return o;
  }
  std::string token;
  if (!o.token_file.empty()) token = read_token_file(o.token_file);
  else if (const char* t = std::getenv("RINGFENCE_TOKEN"); t && *t) token = t;
  // Only the nodes that connect to the first one need its address.
  const bool needs_addr = step->node_id != 0 && o.etcd.empty();
  const std::string addr = needs_addr ? node_addr(first_node(step->step_nodes)) : "";
  SlurmPlan plan = plan_slurm(o, *step, addr, std::nullopt, token);
  rf::log::info("run", plan.summary);
  for (const auto& w : plan.warnings) rf::log::warn("run", w);
  plan.options.token = plan.token;
  return plan.options;
}

}  // namespace rf::apps
