#include "apps/ringfence/job_summary.h"

#include <algorithm>

namespace rf::apps {

using nlohmann::json;

json job_summary(const JobSummaryInput& in) {
  // Every fault that fired: the launcher's own (at=), then the workers' (step=, as they
  // told the coordinator), in time order.
  json injected = in.launcher_injected;
  for (json x : in.coordinator.value("fired", json::array())) {
    x["by"] = "worker";
    injected.push_back(std::move(x));
  }
  std::stable_sort(injected.begin(), injected.end(), [](const json& a, const json& b) {
    return a.value("wall_us", int64_t{0}) < b.value("wall_us", int64_t{0});
  });
  return {{"exit_status", in.exit_status},
          {"ok", in.exit_status == 0},
          {"error", in.error},
          {"phase", in.last_status.value("phase", "")},
          {"generations", in.coordinator.value("generation", json(nullptr))},
          {"restarts", in.restarts},
          {"wall_s", in.wall_s},
          {"start_wall_us", in.start_wall_us},
          {"injected", injected},
          {"not_fired", in.not_fired},
          {"last_step", in.last_step},
          // Disk checkpoints that could not be written (warnings: the job went on), from the
          // writers' heartbeats (elastic/checkpoint_health.h).
          {"checkpoints_failed", in.last_status.value("checkpoints_failed", int64_t{0})},
          {"checkpoint_error", in.last_status.value("checkpoint_error", "")},
          {"workers", in.workers},
          // Where the workers' flight records of failed generations are (null: none written).
          {"run_dir", in.run_dir.empty() ? json(nullptr) : json(in.run_dir)},
          {"recoveries", in.coordinator.value("recoveries", json::array())},
          {"leaders", in.coordinator.value("leaders", json::array())}};
}

}  // namespace rf::apps
