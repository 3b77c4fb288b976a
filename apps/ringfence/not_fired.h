#pragma once
// The --inject specs that did not fire, with why: the end-of-job summary's `not_fired`
// (docs/launcher.md). A pure judgement over what the launcher saw of the job.
//
// certain: an at= spec for a slot of this node that the launcher did not execute (the job
// ended first, or the slot was not running then). A step= spec is fired by a worker, which
// tells the coordinator first (`fired`, any node's worker): one not in that list whose
// step is beyond the last step the coordinator's statuses showed — certain when the job
// ended DONE (every member left, and a leave carries the step it ended at), else not: a
// worker's step comes with its heartbeats, so it can be one heartbeat behind the real one.
// One whose step was reached: certain when DONE (no worker had it fire), else not (the
// job may have ended between the step and the fault).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "elastic/fault_spec.h"

namespace rf::apps {

// What the launcher saw of the job, for its specs (indices into the spec list).
struct InjectRecord {
  std::set<int> node_slots;               // the slots this launcher runs
  std::set<size_t> due;                   // at= specs whose time came (executed, or skipped)
  std::map<size_t, std::string> skipped;  // at= specs not executed: why
  std::optional<double> ran_for_s;        // seconds since the job first ran; none: it never ran
  int64_t last_step = -1;                 // the highest step the coordinator's statuses showed
  bool done = false;                      // the job ended DONE
};

// [{spec, certain, reason}] for each spec of `specs` that did not fire; `fired`: the
// coordinator's list of the specs workers fired ([{spec, ...}]).
nlohmann::json not_fired(const std::vector<elastic::FaultSpec>& specs, const InjectRecord& seen,
                         const nlohmann::json& fired);

}  // namespace rf::apps
