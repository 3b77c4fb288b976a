#include "apps/ringfence/worker_env.h"

#include <cstring>

#include "base/str.h"

namespace rf::apps {

std::vector<std::string> worker_environment(const WorkerEnv& w, char* const* inherited) {
  std::vector<std::string> env;
  for (char* const* e = inherited; e && *e; ++e)
    if (std::strncmp(*e, "RINGFENCE_", 10) != 0) env.emplace_back(*e);
  if (!w.coord.empty()) env.push_back("RINGFENCE_COORD=" + w.coord);
  if (!w.etcd.empty()) {  // the worker finds the leading coordinator replica there
    env.push_back("RINGFENCE_ETCD=" + w.etcd);
    env.push_back("RINGFENCE_JOB=" + w.job);
  }
  env.push_back("RINGFENCE_TOKEN=" + w.token);
  env.push_back(str("RINGFENCE_SLOT=", w.slot));
  env.push_back(str("RINGFENCE_INCARNATION=", w.incarnation));
  env.push_back(str("RINGFENCE_WORLD=", w.world));
  env.push_back(str("RINGFENCE_NODE_RANK=", w.node_rank));
  env.push_back(str("RINGFENCE_SPARE=", w.spare ? 1 : 0));
  env.push_back(str("RINGFENCE_LOCAL_RANK=", w.local_rank));
  env.push_back(str("RINGFENCE_LOCAL_WORLD=", w.local_world));
  // Whether the job had run (as this launcher saw it) when this incarnation started: a
  // restart into a job that ran may skip the start-up checks its start made; one before
  // that (after a start-up error) must make them, to fail again and end the job.
  env.push_back(str("RINGFENCE_JOB_RAN=", w.job_ran ? 1 : 0));
  // Every spec goes to the workers; they act on step= specs (FaultSpec::launcher_side()
  // tells the at= ones, which the launcher executes itself).
  env.push_back("RINGFENCE_INJECT=" + w.inject);
  if (!w.trace.empty()) env.push_back("RINGFENCE_TRACE=" + w.trace);  // ddp::TrainerConfig::trace
  // Where this incarnation says why it failed (elastic/error_file.h: the restart policy).
  if (!w.error_file.empty()) env.push_back("RINGFENCE_ERROR_FILE=" + w.error_file);
  // Where the worker writes its flight records (ddp::TrainerConfig::flight_recorder).
  if (!w.run_dir.empty()) env.push_back("RINGFENCE_RUN_DIR=" + w.run_dir);
  return env;
}

}  // namespace rf::apps
