#pragma once
// WorkerEnv — what `ringfence run` tells each worker through its environment (docs/launcher.md,
// "Environment of each worker"), in one place: the launcher writes it (worker_environment:
// the launcher's own environment without any RINGFENCE_* variable, then this worker's
// values) and the worker reads it back (read_worker_env), with one set of names, one parser
// and one set of defaults. Not here: RINGFENCE_LOG_LEVEL and RINGFENCE_HOST_ID (the user's
// settings, base/log.h, comm/host_identity.h) and RF_RANK/RF_WORLD/RF_STORE (comm's local
// launcher, comm/bootstrap/local_launcher.h).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rf::elastic {

struct WorkerEnv {
  std::string coord;   // host:port (empty with etcd)
  std::string etcd;    // the etcd endpoints of several coordinator replicas ("" : none)
  std::string job;     // the job's name in etcd (with etcd)
  std::string token;
  int slot = 0;
  int64_t incarnation = 0;
  int world = 1;       // target world size, all nodes
  int node_rank = 0;
  bool spare = false;
  // This worker among the processes this launcher runs (its workers, then its spares), and
  // their number: a program places itself by them (train_mlp's GPU, models/device_choice.h).
  int local_rank = 0;
  int local_world = 1;
  bool job_ran = false;
  std::string inject;  // every --inject spec, ';'-separated
  std::string trace = "";  // this incarnation's trace file (--trace; "" = none)
  std::string error_file = "";  // this incarnation's RINGFENCE_ERROR_FILE ("" = none)
  std::string run_dir = "";     // RINGFENCE_RUN_DIR: where post-mortems go (flight records)

  // Started by `ringfence run`: a coordinator to join (RINGFENCE_COORD or RINGFENCE_ETCD).
  bool launched() const { return !coord.empty() || !etcd.empty(); }
};

// "NAME=value" entries: `inherited` (e.g. environ) less its RINGFENCE_* entries, then ours.
std::vector<std::string> worker_environment(const WorkerEnv& w, char* const* inherited);

// The worker's side: every variable worker_environment writes; an absent or empty one keeps
// its default above. Throws rf::InvalidInput naming a variable whose value does not parse (an
// integer out of range, a flag other than 0 or 1), or, when launched(), one of TOKEN, SLOT and
// INCARNATION that is missing. `get` is getenv by default (a test passes its own).
using Getenv = std::function<const char*(const char*)>;
WorkerEnv read_worker_env(const Getenv& get = nullptr);

}  // namespace rf::elastic
