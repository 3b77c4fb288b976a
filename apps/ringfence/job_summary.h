#pragma once
// The launcher's --summary document (docs/launcher.md, "--summary FILE"): the job's end as
// the launcher saw it (exit status, error, its workers' exits and spawns, the faults it
// injected) joined with the coordinator's summary (recoveries, the workers' fired faults,
// leaders) and its last status (the failed checkpoints). A pure function of its input.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace rf::apps {

struct JobSummaryInput {
  int exit_status = 1;
  std::string error;
  nlohmann::json coordinator;  // its summary_reply ({} when it could not be had)
  nlohmann::json last_status;  // its last status_reply: phase, checkpoints_failed, checkpoint_error
  nlohmann::json launcher_injected = nlohmann::json::array();  // the launcher's own at= faults
  nlohmann::json not_fired = nlohmann::json::array();
  int restarts = 0;
  double wall_s = 0;
  int64_t start_wall_us = 0;
  int64_t last_step = -1;
  nlohmann::json workers = nlohmann::json::array();
  std::string run_dir;  // where flight records were written ("" : none were)
};

nlohmann::json job_summary(const JobSummaryInput& in);

}  // namespace rf::apps
