// Every enum whose words come from a base/enum_names.h table: its own to_string (or *_name)
// gives exactly the pinned words, in enumerator order (they are a protocol: the event log,
// the wire, audit lines and messages); its parser, or the table, reads each word back; no
// word or value is listed twice. A word added to a table fails here until it is pinned here
// too; an enumerator left out of its table entirely is caught by no check (see base/enum_names.h).
#include <doctest/doctest.h>

#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "apps/ringfence/restart_policy.h"
#include "base/error.h"
#include "base/log.h"
#include "base/thread_sched.h"
#include "ckpt/staging.h"
#include "ckpt/storage_error.h"
#include "comm/communicator.h"
#include "comm/nccl/regroup.h"
#include "comm/nccl/wait_loop.h"
#include "comm/types.h"
#include "comm/ucx/ucx_communicator.h"
#include "ddp/recovery_phase.h"
#include "ddp/worker_life.h"
#include "elastic/fault_spec.h"
#include "elastic/lease_renewal.h"
#include "elastic/liveness.h"
#include "elastic/membership_types.h"
#include "elastic/messages.h"
#include "elastic/round_decision.h"

namespace {

// to_string of any of them, found by argument-dependent lookup in the enum's namespace.
constexpr auto kToString = [](auto v) { return std::string(to_string(v)); };

// `name` names value i of the enum `words[i]`, and i == words.size() "?"; every entry of
// `table` is its name's, read back by `parse`; words and values are unique.
template <class E, size_t N, class Name, class Parse>
void check_enum(const char* what, const rf::EnumName<E> (&table)[N], Name name, Parse parse,
                std::initializer_list<const char*> words) {
  INFO(what);
  REQUIRE(words.size() == N);
  size_t i = 0;
  for (const char* w : words) {
    CHECK(std::string(name(static_cast<E>(i))) == w);
    ++i;
  }
  CHECK(std::string(name(static_cast<E>(N))) == "?");
  std::set<std::string> seen_words;
  std::set<long long> seen_values;
  for (const auto& e : table) {
    const std::string word = name(e.value);
    CHECK(word == e.name);
    const std::optional<E> back = parse(word);
    CHECK_MESSAGE((back.has_value() && *back == e.value), word);
    seen_words.insert(word);
    seen_values.insert(static_cast<long long>(e.value));
  }
  CHECK(seen_words.size() == N);
  CHECK(seen_values.size() == N);
  CHECK_FALSE(parse("?").has_value());
  CHECK_FALSE(parse("").has_value());
}

// The parser of an enum that has no public one: its table.
template <class E, size_t N>
auto table_parser(const rf::EnumName<E> (&table)[N]) {
  return [&table](std::string_view text) { return rf::parse_enum(table, text); };
}

}  // namespace

TEST_CASE("base: log levels and thread priorities") {
  using namespace rf;
  check_enum("log::Level", log::kLevelNames, kToString, table_parser(log::kLevelNames),
             {"debug", "info", "warn", "error"});
  check_enum("ThreadPriority", kThreadPriorityNames, kToString, table_parser(kThreadPriorityNames),
             {"real-time", "raised", "unchanged"});
}

TEST_CASE("comm: backends, dtypes, poison kinds, NCCL wait actions and regroup kinds") {
  using namespace rf::comm;
  const auto parse_backend_opt = [](std::string_view text) -> std::optional<Backend> {
    try {
      return parse_backend(text);
    } catch (const rf::InvalidInput&) {
      return std::nullopt;
    }
  };
  check_enum("Backend", kBackendNames, backend_name, parse_backend_opt, {"ucx", "nccl"});
  check_enum("DType", kDTypeNames, dtype_name, table_parser(kDTypeNames), {"float", "double", "int64", "uint64"});
  check_enum("PoisonKind", kPoisonKindNames, kToString, table_parser(kPoisonKindNames),
             {"peer", "timeout", "abort"});
  check_enum("nccl::WaitAction", nccl::kWaitActionNames, nccl::action_name, table_parser(nccl::kWaitActionNames),
             {"keep polling", "done", "fail", "revoke"});
  check_enum("nccl::RegroupPlan::Kind", nccl::kRegroupKindNames, nccl::regroup_kind_name,
             table_parser(nccl::kRegroupKindNames), {"shrink", "fresh init"});
}

TEST_CASE("ckpt: storage operations and staging verdicts") {
  using namespace rf::ckpt;
  check_enum("StorageOp", kStorageOpNames, kToString, table_parser(kStorageOpNames),
             {"create", "write", "fsync", "close", "rename", "fsync of the directory"});
  check_enum("StagingVerdict", kStagingVerdictNames, kToString, table_parser(kStagingVerdictNames),
             {"stage", "not out of space", "no older checkpoint to make room with",
              "the directory cannot hold it even alone"});
}

TEST_CASE("ddp: recovery phases and the worker's life") {
  using namespace rf::ddp;
  check_enum("ddp::RecoveryPhase", kRecoveryPhaseNames, recovery_phase_name, table_parser(kRecoveryPhaseNames),
             {"abort", "report", "plan", "connect", "transfer", "verify", "resume"});
  static_assert(std::string_view(recovery_phase_name(RecoveryPhase::Verify)) == "verify");  // still constexpr
  check_enum("WorkerState", kWorkerStateNames, kToString, table_parser(kWorkerStateNames),
             {"joining", "reporting", "forming", "resuming", "training", "leaving", "dropping", "done"});
  check_enum("WorkerEventKind", kWorkerEventKindNames, kToString, table_parser(kWorkerEventKindNames),
             {"joined", "job finished", "plan received", "fenced", "formed", "form failed", "running", "revoked",
              "step failed", "reconfigure", "stop requested", "finished", "left", "comm dropped"});
  check_enum("StepFailure", kStepFailureNames, kToString, table_parser(kStepFailureNames),
             {"none", "transport", "divergence"});
  check_enum("WorkerAction", kWorkerActionNames, kToString, table_parser(kWorkerActionNames),
             {"join", "report", "form", "resume", "train", "leave", "drop comm", "end", "end standby"});
}

TEST_CASE("elastic: membership words (event log, wire, summary)") {
  using namespace rf::elastic;
  check_enum("Phase", kPhaseNames, kToString, parse_phase, {"FORMING", "RUNNING", "RECOVERING", "STOPPED", "DONE"});
  check_enum("Cause", kCauseNames, kToString, parse_cause,
             {"connection_closed", "process_exited", "replaced", "lease_expired", "hung", "wedged", "report_timeout",
              "ready_timeout", "left_during_recovery", "failure_report", "member_left_generation", "reconfigure",
              "leader_changed", "gpu_stuck"});
  check_enum("FailureKind", kFailureKindNames, kToString, parse_failure_kind, {"comm", "gpu_stuck"});
  check_enum("StopCause", kStopCauseNames, kToString, table_parser(kStopCauseNames),
             {"below_min_world", "digest_mismatch", "worker_fatal"});
  check_enum("elastic::RecoveryPhase", kRecoveryPhaseNames, kToString, parse_recovery_phase,
             {"connect", "transfer", "verify"});
  check_enum("Activity::Kind", kActivityKindNames, kToString, parse_activity_kind, {"idle", "compute", "wait"});
  check_enum("Answer::Kind", kAnswerKindNames, kToString, parse_answer_kind,
             {"accepted", "stale", "fenced", "refused", "stopped", "finished"});
  check_enum("PlanQuery::Kind", kPlanQueryKindNames, kToString, table_parser(kPlanQueryKindNames),
             {"pending", "plan", "revoked", "fenced", "stopped", "done"});
  check_enum("ReadyQuery::Kind", kReadyQueryKindNames, kToString, table_parser(kReadyQueryKindNames),
             {"pending", "running", "revoked", "fenced", "stopped", "done"});
  check_enum("TransitionEvent", kTransitionEventNames, kToString, parse_transition_event,
             {"join", "refused", "heartbeat_stale", "fail", "evict", "revoke", "report", "stale", "plan", "ready",
              "running", "reconfigure_requested", "stop_requested", "leave", "injected", "stop", "done"});
}

TEST_CASE("elastic: roles, fault specs, liveness, lease renewal and round decisions") {
  using namespace rf::elastic;
  check_enum("Role", kRoleNames, kToString, table_parser(kRoleNames), {"member", "caller", "launcher", "replica"});
  check_enum("FaultKind", kFaultKindNames, kToString, table_parser(kFaultKindNames),
             {"kill", "stop", "hang", "exit", "drop", "slow", "disk", "gpu_hang"});
  check_enum("FaultPhase", kFaultPhaseNames, kToString, table_parser(kFaultPhaseNames),
             {"forward", "backward", "allreduce", "optimizer", "transfer", "recovery", "leave"});
  // The fault grammar reads its kinds and phases from the same tables.
  for (FaultKind k : rf::all_values(kFaultKindNames)) {
    FaultSpec f;
    f.kind = k;
    const std::string text = f.to_string();
    CHECK_MESSAGE(text.rfind(std::string(to_string(k)) + ":", 0) == 0, text);
  }
  CHECK(parse_fault_spec("kill:rank=1:step=5:phase=allreduce").phase == FaultPhase::Allreduce);
  CHECK(parse_fault_spec("gpu_hang:rank=0:step=3").kind == FaultKind::GpuHang);
  check_enum("LivenessVerdict::Kind", kLivenessKindNames, kToString, table_parser(kLivenessKindNames),
             {"alive", "stale", "hung", "wedged"});
  check_enum("RenewalDecision::Kind", kRenewalKindNames, kToString, table_parser(kRenewalKindNames),
             {"send", "wait", "fence"});
  check_enum("RoundDecision::Reason", kRoundReasonNames, kToString, table_parser(kRoundReasonNames),
             {"members_missing", "window_open", "below_min_world", "target_reached", "window_passed"});
}

TEST_CASE("apps: the launcher's restart decisions") {
  using namespace rf::apps;
  check_enum("RestartAction", kRestartActionNames, kToString, table_parser(kRestartActionNames),
             {"restart", "no_restarts_left", "go_on_without", "stop_job"});
  check_enum("ExitAction", kExitActionNames, kToString, table_parser(kExitActionNames),
             {"finished", "restart", "restart_held", "no_restarts_left", "go_on_without", "stop_job"});
  check_enum("HeldAction", kHeldActionNames, kToString, table_parser(kHeldActionNames),
             {"wait", "need_target", "start"});
}
