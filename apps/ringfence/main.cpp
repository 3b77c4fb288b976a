// ringfence — the launcher.
//   ringfence run -n N [options] -- PROGRAM ARGS...   (docs/launcher.md)
//   ringfence coord -n W [--host H] [--port P] [--token-file F] ...
//   ringfence timeline EVENTS.jsonl | ringfence timeline --html OUT.html TRACE.json
#include <signal.h>
#include <sys/stat.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "apps/ringfence/slurm_launch.h"
#include "apps/ringfence/supervisor.h"
#include "apps/ringfence/timeline.h"
#include "apps/ringfence/timeline_html.h"
#include "base/error.h"
#include "base/log.h"
#include "base/output_pump.h"
#include "base/str.h"
#include "apps/ringfence/coord_replica.h"
#include "elastic/coordinator.h"
#include "elastic/launch_options.h"
#include "elastic/token.h"

using namespace rf::elastic;

namespace {

// The synopses are our own text: one per command shows which flags go together (| and
// nested [...]), which a list of flags cannot. `ringfence run --help` and `ringfence coord
// --help` add every flag with what it does and its default (elastic/launch_options.h).
const char* kRunSynopsis =
    "  ringfence run -n N [--min-world M] [--spares K] [--max-restarts R] [--join-window T]\n"
    "                [--heartbeat T --lease T] [--min-world-timeout T] [--report-timeout T] [--inject SPEC]...\n"
    "                [--summary FILE] [--event-log FILE] [--trace FILE] [--stop-grace T] [--quiet]\n"
    "                [--coord HOST:PORT | --etcd URL[,URL...] [--job NAME]] [--token-file F] [--nnodes N --node-rank I]\n"
    "                [--spare-nodes K] [--coord-port P] [--no-slurm]   (inside a Slurm step: docs/slurm.md)\n"
    "                -- PROGRAM ARGS...\n";
const char* kCoordSynopsis =
    "  ringfence coord -n W [--min-world M] [--host H] [--port P] [--token-file F] [--event-log FILE]\n"
    "                [--join-window T] [--heartbeat T --lease T] [--min-world-timeout T] [--report-timeout T]\n"
    "                [--etcd URL[,URL...] [--job NAME] [--id NAME] [--advertise HOST] [--leader-lease T]]\n"
    "                (--etcd: one of several replicas; the job token is read from --token-file or RINGFENCE_TOKEN)\n";
const char* kTimelineSynopsis =
    "  ringfence timeline EVENTS.jsonl     (the coordinator's event log as a timeline)\n"
    "  ringfence timeline --html OUT.html TRACE.json   (a --trace file as a self-contained page)\n";
const char* kSpec =
    "SPEC: KIND:rank=R:step=S[:phase=P][:after_chunks=K] | KIND:rank=R:at=SECONDS\n"
    "      KIND kill|stop|hang|exit|drop|slow; P forward|backward|allreduce|optimizer|transfer|recovery|leave\n"
    "      slow also takes :factor=F:steps=N (N steps from S, each F x the rank's median step time)\n"
    "      stop also takes :for=SECONDS with step= (the process freezes that long, then goes on)\n"
    "      disk:rank=0:step=S[:error=ENOSPC|EIO|EROFS|EDQUOT][:delay=SECONDS][:writes=N]  (checkpoint writes fail or wait)\n"
    "      gpu_hang:rank=R:step=S[:phase=P]  (the worker's GPU gets stuck; --device cuda)\n";
const char* kValues =
    "A flag's value follows it (--lease 2s) or is joined to it (--lease=2s); durations are 2s, 500ms or seconds.\n"
    "See docs/launcher.md.\n";

std::string usage() { return rf::str("usage:\n", kRunSynopsis, kCoordSynopsis, kTimelineSynopsis, kSpec, kValues); }

// `ringfence CMD --help`: the command's synopsis and every flag.
std::string command_help(const std::string& cmd) {
  if (cmd == "run") return rf::str("usage:\n", kRunSynopsis, run_help(), kSpec, kValues);
  if (cmd == "coord") return rf::str("usage:\n", kCoordSynopsis, coord_help(), kValues);
  return usage();
}

// The worker program is looked up as execvpe() will (a name without '/' is searched in
// PATH) and must be an executable file: otherwise every spawn fails the same way, once
// per slot and restart. Throws InvalidInput naming it.
void check_program(const std::string& program) {
  const std::string cannot = "cannot run '" + program + "'";
  auto check_file = [&](const std::string& path) -> std::string {  // "" = runnable, else why not
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
    if (S_ISDIR(st.st_mode)) return "is a directory";
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    if (::access(path.c_str(), X_OK) != 0) return rf::str("not executable (", std::strerror(errno), ")");
    return "";
  };
  if (program.find('/') != std::string::npos) {
    if (std::string why = check_file(program); !why.empty()) throw rf::InvalidInput(cannot + ": " + why);
    return;
  }
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path ? env_path : "/bin:/usr/bin";  // execvpe's default
  size_t begin = 0;
  while (true) {
    const size_t end = path.find(':', begin);
    const std::string dir = path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (check_file((dir.empty() ? "." : dir) + "/" + program).empty()) return;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  throw rf::InvalidInput(cannot + ": not found in PATH, or not executable there");
}

// --summary is written when the job ends; checked now so an unwritable path does not
// lose the result after the whole run. Never created or truncated here: an existing file
// keeps its contents until the summary replaces it.
void check_summary_path(const std::string& path) {
  if (path.empty()) return;
  const std::string cannot = "--summary " + path + ": cannot open for writing";
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw rf::InvalidInput(cannot + ": Is a directory");
    if (::access(path.c_str(), W_OK) != 0) throw rf::InvalidInput(cannot + ": " + std::strerror(errno));
    return;
  }
  if (errno != ENOENT) throw rf::InvalidInput(cannot + ": " + std::strerror(errno));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw rf::InvalidInput(cannot + ": no directory " + dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw rf::InvalidInput(cannot + ": " + dir + ": " + std::strerror(errno));
}

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

int run_coord(const CoordOptions& o) {
  CoordinatorOptions co;
  co.host = o.host;
  co.port = o.port;
  co.event_log = o.event_log;
  const char* env_token = std::getenv("RINGFENCE_TOKEN");
  co.token = env_token && *env_token ? env_token : random_token();
  co.membership.target_world = o.world;
  co.membership.min_world = o.min_world ? o.min_world : o.world;
  co.membership.heartbeat = o.timing.heartbeat;
  co.membership.lease = o.timing.lease;
  co.membership.join_window = o.timing.join_window;
  co.membership.min_world_timeout = o.timing.min_world_timeout;
  co.membership.report_timeout = o.timing.report_timeout;
  if (!o.etcd.empty()) {
    // Replicas share the job's token: it must exist already (every replica reads the same).
    if (env_token && *env_token) co.token = env_token;
    else if (!o.token_file.empty()) co.token = read_token_file(o.token_file);
    else throw rf::InvalidInput("--etcd needs the job's token: --token-file FILE (read) or RINGFENCE_TOKEN");
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    return rf::apps::run_coord_replica(o, co, g_stop);
  }
  Coordinator coord(co);
  if (!o.token_file.empty()) {
    const mode_t old = umask(077);
    std::ofstream f(o.token_file, std::ios::trunc);
    f << co.token << "\n";
    umask(old);
    if (!f) throw rf::Error("cannot write the token file '" + o.token_file + "'");
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("ringfence coord: listening on %s:%d (world %d)\n", o.host.c_str(), coord.port(), o.world);
  std::fflush(stdout);
  coord.start();
  bool had_launcher = false;
  // Serve until Ctrl-C, or until the job is over and every launcher has disconnected.
  while (!g_stop) {
    had_launcher |= coord.launcher_connections() > 0;
    if (coord.finished() && had_launcher && coord.launcher_connections() == 0) break;
    ::poll(nullptr, 0, 50);
  }
  const bool ok = coord.phase() == Phase::Done;
  std::printf("ringfence coord: job %s\n", to_string(coord.phase()));
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(usage().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::fputs(command_help(cmd).c_str(), stdout);
    return 0;
  }
  try {
    if (cmd == "run") {
      RunOptions o;
      try {
        o = rf::apps::place_under_slurm(parse_run_args(args, /*layout_later=*/true));
        check_program(o.program.at(0));
        check_summary_path(o.summary_path);
      } catch (const rf::InvalidInput& e) {
        rf::log::error("run", e.what());
        return 2;  // refused before anything starts
      }
      rf::OutputPump::install();  // no write of ours or a worker's blocks on a stalled reader
      return rf::apps::run_supervisor(o);
    }
    if (cmd == "coord") {
      CoordOptions o;
      try {
        o = parse_coord_args(args);
      } catch (const rf::InvalidInput& e) {
        rf::log::error("coord", e.what());
        return 2;
      }
      rf::OutputPump::install();  // a stalled reader never holds up the coordinator's loop
      return run_coord(o);
    }
    if (cmd == "timeline") {
      if (args.size() == 3 && args[0] == "--html") return rf::apps::write_timeline_html(args[2], args[1]);
      if (args.size() != 1 || args[0] == "--html") {
        std::fprintf(stderr, "usage: ringfence timeline EVENTS.jsonl | ringfence timeline --html OUT.html TRACE.json\n");
        return 2;
      }
      return rf::apps::print_timeline(args[0]);
    }
    rf::log::error("cli", "unknown command '", cmd, "'");
    std::fputs(usage().c_str(), stderr);
    return 2;
  } catch (const rf::Error& e) {
    rf::log::error(cmd, e.what());
    return 1;
  }
}
