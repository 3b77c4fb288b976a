#pragma once
// The coordinator's judgement of a member that is alive (its lease is renewed) but may be
// stuck: docs/protocol.md D3 seen from the coordinator. Pure: a function of (now, what the last
// heartbeat said, when it came, options), unit-tested on a simulated clock.
//
// A worker's heartbeat thread says what its training thread is doing (Activity): idle
// (waiting on the coordinator), computing (a step's forward/backward/optimizer, a recovery
// phase's own work) or waiting inside a collective, for how long — less the time it only
// waited for a CPU (a CPU hog, more ranks than cores: starved, not stuck) and the time the
// whole process did not run (a SIGSTOP, a VM paused by its host: frozen, not stuck; measured
// by its heartbeat thread's late wake-ups) — and its bound — learned from its recent step
// times during training, derived from the state's size during recovery (ddp/stall_bound.h). The coordinator extrapolates the elapsed time from when the
// heartbeat arrived, so the judgement is as precise as the tick, not the heartbeat period.
//
//   compute - runnable - frozen
//     > bound                     -> Hung: nothing it waits for can explain it (a peer that
//                                    waits on it sees a stall, but only it knows it is not
//                                    waiting); user code blocked, a deadlock, a lost thread.
//   wait - runnable - frozen
//     > wedge_factor x bound      -> Wedged: its own D3 (1.5 bounds) should have ended the
//                                    wait; the communicator itself is stuck.
//   idle                          -> Alive: every coordinator wait has its own deadline.
//   last heartbeat older than
//   `fresh_for`                   -> Stale: the process itself stopped talking (SIGSTOP, a
//                                    cut link); not judged here: its lease decides (D2),
//                                    with its true cause. One that talks again within
//                                    the lease was frozen, and says for how long.
//
// A member that stays alive but was judged is evicted (Cause::Hung / Cause::Wedged): the
// launcher SIGKILLs and replaces it, and the round goes on without waiting for it.
#include <string>

#include "base/clock.h"
#include "base/enum_names.h"
#include "elastic/membership_types.h"

namespace rf::elastic {

struct LivenessVerdict {
  // Alive: within its bound, idle or unbounded. Stale: its last heartbeat is too old to
  // judge by; the lease decides. Hung, Wedged: evicted with that cause.
  enum Kind { Alive, Stale, Hung, Wedged } kind = Alive;
  Duration elapsed{};    // in its activity as of now, less the time it waited for a CPU or was frozen
  TimePoint first_seen;  // when the bound was crossed: the moment it could first be seen
  std::string detail;    // for the event log: what, where, how long, which bound
};

inline constexpr EnumName<LivenessVerdict::Kind> kLivenessKindNames[] = {
    {LivenessVerdict::Alive, "alive"}, {LivenessVerdict::Stale, "stale"},
    {LivenessVerdict::Hung, "hung"},   {LivenessVerdict::Wedged, "wedged"}};
static_assert(lists_each_once(kLivenessKindNames));
const char* to_string(LivenessVerdict::Kind k);  // alive, stale, hung, wedged

LivenessVerdict judge_activity(TimePoint now, const Activity& activity, TimePoint received, double wedge_factor,
                               Duration fresh_for);

}  // namespace rf::elastic
