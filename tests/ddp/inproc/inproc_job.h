#pragma once
// An in-process job: W ddp::Trainers as threads of this process, the coordinator in memory
// on a simulated clock (elastic::SimCoordinator) and the data plane over the loopback fabric
// (comm::inproc::LoopbackNetwork): the fault matrix's recovery scenarios in well under a
// second each, with no process, socket or signal.
//
// The job plays the launcher's part: a worker whose fault kills it (kill, exit) dies at once
// (its connection and its endpoints fail, D1) and its slot is started again as the next
// incarnation (Restart); a worker whose fault parks it (hang: its training thread blocks;
// stop: it also sends no heartbeats) makes time pass on the simulated clock, a heartbeat
// period at a time, until the coordinator evicts it (D3 hung, D2 lease expired), and only
// then dies. Time passes for nothing else, so every wait is for an event.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ddp/trainer.h"
#include "elastic/membership_types.h"

namespace rf::ddp::inproc {

enum class Restart {
  AtOnce,       // a dead worker's slot starts again at once (the launcher's default)
  Never,        // the job goes on without it (a shrink)
  AfterShrink,  // once a generation without it runs (shrink, then grow back)
};

struct JobOptions {
  int world = 3;
  int64_t steps = 24;
  int64_t global_batch = 48;
  int micro_shards = 0;                // > 0: exact mode
  std::vector<std::string> faults;     // --inject's grammar (elastic/fault_spec.h)
  Restart restart = Restart::AtOnce;
  // >= 0: every worker holds after applying this step until all `world` of them applied it,
  // so a fault in the next step finds every state at this one (T is this step: no rank behind).
  int64_t sync_step = -1;
  // >= 0: every worker holds after applying this step until it heard that a joiner waits
  // (R5's reconfigure flag), so the grow lands mid-job however fast the job trains.
  int64_t hold_step = -1;
  std::chrono::milliseconds deadline{20000};  // the whole job, on the real clock
};

struct WorkerOutcome {
  int slot = 0;
  int64_t incarnation = 0;
  bool died = false;            // its fault killed it (or it was evicted and then killed)
  std::string error;            // it ended with an exception other than dying
  TrainerResult result;         // when it ran to the end
};

struct JobOutcome {
  std::vector<WorkerOutcome> workers;  // every incarnation, in the order they ended
  std::vector<elastic::RecoveryRecord> recoveries;
  std::vector<elastic::Transition> transitions;  // the coordinator's event log
  elastic::Phase phase = elastic::Phase::Forming;  // at the end
  int restarts = 0;
  bool timed_out = false;
  std::string at_timeout;  // what each worker was blocked in then (SimCoordinator::describe)
  double seconds = 0;

  // The final digests of the workers that trained to the end (not spares never needed).
  std::vector<std::string> final_digests() const;
  // Slots the coordinator evicted or failed, with the cause, in order ("1:hung").
  std::vector<std::string> failures() const;
  // The coordinator's transitions, one per line (simulated ms, event, slot/incarnation,
  // generation, step, cause), and how each worker ended: for a failed check's message.
  std::string event_log() const;
  // Every worker's error, one per line ("" when none).
  std::string errors() const;
};

JobOutcome run_job(const JobOptions& options);

}  // namespace rf::ddp::inproc
