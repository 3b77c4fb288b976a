#include "elastic/membership_types.h"

namespace rf::elastic {

const char* to_string(Phase p) { return name_of(kPhaseNames, p); }
std::optional<Phase> parse_phase(const std::string& text) { return parse_enum(kPhaseNames, text); }

const char* to_string(Cause c) { return name_of(kCauseNames, c); }
std::optional<Cause> parse_cause(const std::string& text) { return parse_enum(kCauseNames, text); }

bool evicts(Cause c) {
  return c == Cause::LeaseExpired || c == Cause::Hung || c == Cause::Wedged || c == Cause::ReportTimeout ||
         c == Cause::ReadyTimeout || c == Cause::GpuStuck;
}

const char* to_string(StopCause c) { return name_of(kStopCauseNames, c); }

const char* to_string(RecoveryPhase p) { return name_of(kRecoveryPhaseNames, p); }
std::optional<RecoveryPhase> parse_recovery_phase(const std::string& text) {
  return parse_enum(kRecoveryPhaseNames, text);
}

const char* to_string(Activity::Kind k) { return name_of(kActivityKindNames, k); }
std::optional<Activity::Kind> parse_activity_kind(const std::string& text) {
  return parse_enum(kActivityKindNames, text);
}

const char* to_string(Answer::Kind k) { return name_of(kAnswerKindNames, k); }
std::optional<Answer::Kind> parse_answer_kind(const std::string& text) { return parse_enum(kAnswerKindNames, text); }

const char* to_string(PlanQuery::Kind k) { return name_of(kPlanQueryKindNames, k); }
const char* to_string(ReadyQuery::Kind k) { return name_of(kReadyQueryKindNames, k); }

const char* to_string(TransitionEvent e) { return name_of(kTransitionEventNames, e); }
std::optional<TransitionEvent> parse_transition_event(const std::string& text) {
  return parse_enum(kTransitionEventNames, text);
}

}  // namespace rf::elastic
