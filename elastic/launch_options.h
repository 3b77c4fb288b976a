#pragma once
// Command lines of `ringfence run` and `ringfence coord`, parsed (CLI11, through
// base/cli.h) into typed options (the environment only supplies defaults). `--flag VALUE`
// or `--flag=VALUE`. Every mistake throws rf::InvalidInput naming the flag as it was
// typed, before anything starts.
#include <string>
#include <vector>

#include "base/clock.h"
#include "elastic/fault_spec.h"

namespace rf::elastic {

struct TimingFlags {
  Duration heartbeat = std::chrono::milliseconds(100);
  Duration lease = std::chrono::seconds(1);
  Duration join_window = std::chrono::seconds(2);
  Duration min_world_timeout = std::chrono::seconds(30);
  Duration report_timeout = std::chrono::seconds(30);  // a member silent in a round is evicted
};

struct RunOptions {
  int nprocs = 0;         // -n: workers on this node (and the target world W when embedded)
  int min_world = 0;      // --min-world (0: W)
  int spares = 0;         // --spares: extra workers that wait to fill a hole
  int max_restarts = 3;   // --max-restarts: per slot
  TimingFlags timing;     // --heartbeat --lease --join-window --min-world-timeout --report-timeout
  std::vector<FaultSpec> inject;  // --inject (repeatable)
  std::string summary_path;       // --summary FILE
  std::string event_log;          // --event-log FILE
  std::string run_dir;            // --run-dir DIR (empty: a fresh one beside the event log or in TMPDIR)
  std::string trace = "";         // --trace FILE (docs/trace.md)
  std::string coord;              // --coord HOST:PORT (empty: embedded coordinator)
  std::string etcd;               // --etcd URL[,URL...]: follow the leader of coordinator replicas
  std::string job = "ringfence";  // --job NAME: the job's name in etcd
  std::string token_file;         // --token-file FILE (with --coord; else RINGFENCE_TOKEN)
  int nnodes = 1;                 // --nnodes
  int node_rank = 0;              // --node-rank
  // The embedded coordinator's address: loopback and any free port unless under Slurm
  // (elastic/slurm.h: the first node listens on every interface, --coord-port or a port
  // chosen by the job id).
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;            // --coord-port (Slurm only)
  int spare_nodes = 0;            // --spare-nodes K (Slurm only): the step's last K nodes run spares only
  bool spare_node = false;        // this node runs spares only (set by the Slurm plan)
  int first_spare_slot = -1;      // this node's first spare slot (-1: W + node_rank * spares)
  bool no_slurm = false;          // --no-slurm: ignore the Slurm environment
  bool under_slurm = false;       // placed by the Slurm plan (its workers ignore SIGTERM / SIGINT)
  std::string token;              // the job token decided before start (the Slurm plan); "" : as below
  Duration stop_grace = std::chrono::seconds(10);  // --stop-grace: Ctrl-C -> kill after this
  bool quiet = false;             // --quiet: no live status line
  std::vector<std::string> program;  // after --
};

struct CoordOptions {
  std::string host = "127.0.0.1";  // --host
  int port = 29400;                // --port
  int world = 0;                   // -n: target world size W (all nodes)
  int min_world = 0;               // --min-world (0: W)
  TimingFlags timing;
  std::string event_log;   // --event-log FILE
  std::string token_file;  // --token-file FILE: the job token is written there (mode 0600)
  // Several replicas: --etcd URL[,URL...] elects one leader among them (the token must then
  // exist: --token-file FILE is read, or RINGFENCE_TOKEN), --job NAME names the job's keys,
  // --id NAME names this replica (default host:port), --advertise HOST is the address
  // workers reach it at (default --host), --leader-lease T its etcd lease.
  std::string etcd;
  std::string job = "ringfence";
  std::string id;
  std::string advertise;
  Duration leader_lease = std::chrono::seconds(3);
};

// "2s", "500ms", "1.5" (seconds). Throws rf::InvalidInput naming `flag`.
Duration parse_duration(const std::string& flag, const std::string& text);
// layout_later: the checks that depend on the world size (check_run_layout) are left to
// the caller, which may place the launcher first (under Slurm, elastic/slurm.h).
RunOptions parse_run_args(const std::vector<std::string>& args, bool layout_later = false);
// --min-world, --node-rank and --inject ranks against the world size; --nnodes > 1 needs a
// coordinator elsewhere. Throws rf::InvalidInput.
void check_run_layout(const RunOptions& o);
CoordOptions parse_coord_args(const std::vector<std::string>& args);
// Every flag of the command, one line each: its value, what it does, its default.
std::string run_help();
std::string coord_help();

}  // namespace rf::elastic
