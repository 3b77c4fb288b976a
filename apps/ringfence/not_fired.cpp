#include "apps/ringfence/not_fired.h"

#include <algorithm>
#include <cstdio>

#include "base/str.h"

namespace rf::apps {

using nlohmann::json;
using rf::elastic::FaultPhase;
using rf::elastic::FaultSpec;

json not_fired(const std::vector<FaultSpec>& specs, const InjectRecord& seen, const json& fired) {
  json out = json::array();
  for (size_t i = 0; i < specs.size(); ++i) {
    const FaultSpec& f = specs[i];
    std::string why;
    bool certain = true;
    if (f.launcher_side()) {
      if (!seen.node_slots.count(f.rank)) continue;  // another node's launcher executes it
      if (auto it = seen.skipped.find(i); it != seen.skipped.end()) why = it->second;
      else if (seen.due.count(i)) continue;
      else if (!seen.ran_for_s) why = "the job never ran";
      else {
        char ran[32];
        std::snprintf(ran, sizeof ran, "%.1f", *seen.ran_for_s);
        why = rf::str("the job ended ", ran, " s after it first ran (at=", *f.at_seconds, ")");
      }
    } else if (f.step) {
      const std::string spec = f.to_string();
      if (std::any_of(fired.begin(), fired.end(), [&](const json& x) { return x.value("spec", "") == spec; }))
        continue;
      const bool done = seen.done;
      certain = done;
      if (*f.step > seen.last_step && done) {
        why = seen.last_step < 0 ? std::string("the job ended before any step")
                                 : rf::str("the job ended at step ", seen.last_step);
      } else if (*f.step > seen.last_step) {
        why = seen.last_step < 0 ? std::string("no step was reported")
                                 : rf::str("the last step reported was ", seen.last_step);
        why += " (the workers report their step by heartbeat, so the job may have gone a little further)";
      } else {
        why = rf::str("step ", *f.step, " was reached, but no worker fired it");
        if (f.phase == FaultPhase::Transfer)
          why += rf::str(" (phase=transfer fires only in a recovery that redoes step ", *f.step, ", in rank ", f.rank,
                         " if it sends or receives the state)");
        else if (f.phase == FaultPhase::Recovery)
          why += rf::str(" (phase=recovery fires only in a recovery that redoes step ", *f.step, ")");
        else if (f.after_chunks)
          why += rf::str(" (it fires in the worker of rank ", f.rank, ", in its first incarnation only, once ",
                         *f.after_chunks, " chunk(s) of the step's all-reduce went through: it may have had fewer)");
        else
          why += rf::str(" (it fires in the worker of rank ", f.rank, " at that step, in its first incarnation only)");
        if (!done) why += "; the job did not end DONE";
      }
    } else {
      continue;
    }
    out.push_back({{"spec", f.to_string()}, {"certain", certain}, {"reason", why}});
  }
  return out;
}

}  // namespace rf::apps
