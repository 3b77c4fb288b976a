#pragma once
// The environment `ringfence run` gives a worker (docs/launcher.md, "Environment of each
// worker"): the launcher's own environment without any RINGFENCE_* variable, then the
// launcher's RINGFENCE_* values for this worker.
#include <cstdint>
#include <string>
#include <vector>

namespace rf::apps {

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
};

// "NAME=value" entries: `inherited` (e.g. environ) less its RINGFENCE_* entries, then ours.
std::vector<std::string> worker_environment(const WorkerEnv& w, char* const* inherited);

}  // namespace rf::apps
