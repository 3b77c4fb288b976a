#pragma once
// RecoveryPhase — which part of docs/protocol.md's recovery a worker is in, as its audit lines
// ("phase") and comm's flight recorder (comm::set_phase_label) record it. One value per
// function of ddp/recovery.h: Abort (step 1), Report (steps 2-4), Plan (adopting the plan),
// Connect (step 5), Transfer (step 6), Verify (step 7), Resume (step 8).
#include "base/enum_names.h"

namespace rf::ddp {

enum class RecoveryPhase { Abort, Report, Plan, Connect, Transfer, Verify, Resume };
inline constexpr EnumName<RecoveryPhase> kRecoveryPhaseNames[] = {
    {RecoveryPhase::Abort, "abort"},     {RecoveryPhase::Report, "report"},     {RecoveryPhase::Plan, "plan"},
    {RecoveryPhase::Connect, "connect"}, {RecoveryPhase::Transfer, "transfer"}, {RecoveryPhase::Verify, "verify"},
    {RecoveryPhase::Resume, "resume"},
};
static_assert(lists_each_once(kRecoveryPhaseNames));

// The lower-case name the audit log and the flight recorder write ("transfer").
constexpr const char* recovery_phase_name(RecoveryPhase p) { return name_of(kRecoveryPhaseNames, p); }

// The label the flight recorder carries while the step loop runs (no recovery phase).
inline constexpr const char* kTrainingPhaseLabel = "train";

}  // namespace rf::ddp
