#pragma once
// The plan of a recovery round (docs/protocol.md step 4) as a pure function of the reports:
// T = the largest reported step; every worker that reported T must agree on the digest
// (else the job stops with an error naming workers and digests — never continue on
// diverged replicas; so does a round whose digests are of two versions, never compared);
// survivors keep their order; a replacement takes the rank of the
// worker it replaces (same slot, or a spare filling the hole) so with the same W the
// partition of every batch is unchanged; each worker behind T and each new worker gets
// a source rank holding T (round-robin over the holders, to spread the transfers).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rf::elastic {

struct WorkerId {
  int slot = -1;
  int64_t incarnation = 0;
  bool operator==(const WorkerId&) const = default;
};

// What a worker says about its state S in a round (step 2). Restarted or new workers
// report has_state = false.
struct StateReport {
  bool has_state = false;
  int64_t step = -1;   // last applied step, -1 before the first
  std::string digest;  // StateDigest::hex() of S at `step`, version prefix included
  // The generation whose communicator this worker still holds and can form the next one
  // from (comm::Communicator::can_regroup; NCCL's shrink); 0: none. Said with or without state.
  uint64_t comm_generation = 0;
};

struct PlanRank {
  int rank = 0;
  WorkerId worker;
  StateReport report;
  std::optional<int> source_rank;  // set when this rank must receive S_T
};

struct Plan {
  uint64_t generation = 0;
  int64_t target_step = -1;  // T
  std::string target_digest;  // the digest every holder of T agreed on ("" when fresh)
  bool fresh_start = false;   // nobody holds state: initialise (or restore from disk)
  // A fresh start after a generation of this job already ran: every worker that held
  // state is gone (docs/protocol.md "Whole-job failure"). Each worker restores this job's
  // newest valid checkpoint, if it finds one, and reports it in a new round.
  bool whole_job_restart = false;
  std::string job_id;  // the coordinator's, one per job; checkpoints record it
  // How every rank forms this generation's communicator (comm::CommRegroup): 0, afresh;
  // g, by shrinking generation g's (decide_shrink_from below).
  uint64_t shrink_from = 0;
  std::vector<PlanRank> ranks;
  int world() const { return static_cast<int>(ranks.size()); }
  const PlanRank* find(int slot) const;
};

struct Reporter {
  WorkerId worker;
  StateReport report;
  uint64_t join_order = 0;  // earlier joiners fill holes first
};

struct PlanOutcome {
  std::optional<Plan> plan;
  std::string error;  // set when the round must stop the job (digest mismatch)
};

// prev_slots: the rank order of the last generation that ran (empty when forming).
// At most target_world reporters are placed; the others stay standby.
PlanOutcome make_plan(uint64_t generation, const std::vector<int>& prev_slots,
                      const std::vector<Reporter>& reporters, int target_world);

// Plan::shrink_from of `plan`: last_generation (the last generation that ran: the one whose
// rank order make_plan got as prev_slots; 0 when none) iff every rank of the plan was a
// member of it (last_members, in rank order: same slot AND incarnation, a restarted worker
// is a new member), in the same relative order, at least one of its members is not in the
// plan, and every rank reported comm_generation == last_generation. Otherwise 0 (afresh):
// a rank that joins, the same members again, a rank without that communicator, or a new
// order cannot be shrunk into.
uint64_t decide_shrink_from(uint64_t last_generation, const std::vector<WorkerId>& last_members, const Plan& plan);

}  // namespace rf::elastic
