#pragma once
// The coordinator's larger replies, built from Membership's state: the launcher's status
// (its live line), the end-of-job summary, and the JSON of a plan (both ways) and a worker.
// Pure functions of what they are given.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "elastic/control_state.h"
#include "elastic/membership.h"

namespace rf::elastic {

// The live line's figures, as a member's last heartbeat gave them.
struct Progress {
  int64_t incarnation = 0;
  int64_t step = -1;
  std::optional<double> loss, samples_per_s;
};

nlohmann::json worker_json(WorkerId w);  // null for slot -1
nlohmann::json plan_json(const Plan& p);
// The plan of a plan reply (plan_json's fields; shrink_from absent = 0). Throws
// ProtocolError naming the field at fault.
Plan parse_plan_json(const nlohmann::json& j);

// status_reply. progress: by slot; evictions: the history handed to launchers; leader: the
// leading replica's id ("" for the single coordinator); leaders: every term, oldest first.
nlohmann::json status_reply(const Membership& m, int target_world, const std::map<int, Progress>& progress,
                            const std::vector<nlohmann::json>& evictions, const std::string& leader,
                            const std::vector<LeaderTerm>& leaders);
// summary_reply; wall(t): the wall-clock microseconds of a steady-clock time point.
nlohmann::json summary_reply(const Membership& m, const std::function<int64_t(TimePoint)>& wall,
                             const std::vector<LeaderTerm>& leaders);

}  // namespace rf::elastic
