#include "apps/ringfence/restart_policy.h"

#include <cctype>

#include "base/str.h"

namespace rf::apps {

const char* to_string(RestartAction a) {
  switch (a) {
    case RestartAction::Restart: return "restart";
    case RestartAction::NoRestartsLeft: return "no_restarts_left";
    case RestartAction::GoOnWithout: return "go_on_without";
    case RestartAction::StopJob: return "stop_job";
  }
  return "?";
}

std::string error_signature(const std::string& error) {
  std::string out;
  for (size_t i = 0; i < error.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(error[i]))) {
      if (out.empty() || out.back() != '#') out.push_back('#');
    } else {
      out.push_back(error[i]);
    }
  }
  return out;
}

RestartDecision decide_restart(const RestartInput& in) {
  const size_t n = in.errors.size();
  const size_t same_needed = kSameErrorRestarts + 1;  // the first failure and each restart's
  bool same = n >= same_needed && !in.errors.back().empty();
  for (size_t i = n - std::min(n, same_needed); same && i < n; ++i)
    same = error_signature(in.errors[i]) == error_signature(in.errors.back());
  if (same) {
    const std::string what =
        rf::str("slot ", in.slot, " failed with the same error after each of ", kSameErrorRestarts, " restarts: ",
                in.errors.back());
    if (in.others >= in.min_world)
      return {RestartAction::GoOnWithout,
              rf::str(what, " -- not restarted again; the job goes on without it (", in.others, " member(s), --min-world ",
                      in.min_world, ")")};
    return {RestartAction::StopJob, rf::str(what, " -- not restarted again, the job stops (without it ", in.others,
                                            " member(s), fewer than --min-world ", in.min_world, ")")};
  }
  if (in.restarts >= in.max_restarts) return {RestartAction::NoRestartsLeft, ""};
  return {RestartAction::Restart, ""};
}

}  // namespace rf::apps
