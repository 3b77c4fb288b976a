#pragma once
// FaultInjector — the worker side of `--inject` (elastic/fault_spec.h grammar): the
// trainer calls at(phase, step) at each injection point and the chunk hook of the
// communicator calls on_chunk during all-reduces. A spec fires at most once, only in
// incarnation 0 of the process (a replacement must not repeat its predecessor's fault),
// when this worker's CURRENT rank and the step match. A spec without phase= fires at the
// start of the step (forward).
//   kill  SIGKILL self          stop  SIGSTOP self (D2: the lease expires)
//   hang  the calling thread blocks forever (the heartbeat thread goes on: D3 finds it)
//   exit  _exit(3)              drop  force-closes this rank's endpoints (the hook given)
//   slow  sleeps slow_ms once (a slow rank is not a failure)
// Phases transfer/recovery match the step being redone (T+1) of a recovery.
// Once per job, not once per attempt: a step that is redone after a recovery does not
// fire its faults again (else a shrunk group, whose new rank R is another worker, would
// repeat the fault for ever). So training-phase specs of step s fire only while s is
// beyond every redone step seen so far, and transfer/recovery specs only in the first
// recovery that redoes s.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "elastic/fault_spec.h"

namespace rf::ddp {

class FaultInjector {
 public:
  FaultInjector() = default;
  FaultInjector(std::vector<elastic::FaultSpec> specs, int64_t incarnation, int slot);
  // From RINGFENCE_INJECT (workers ignore the launcher's at= specs).
  static std::unique_ptr<FaultInjector> from_env(int64_t incarnation, int slot);

  void set_rank(int rank) { rank_.store(rank); }
  // A plan arrived that resumes at step `redo` (T+1); fresh starts do not count.
  void on_plan(int64_t redo, bool fresh);
  void set_drop(std::function<void()> drop) { drop_ = std::move(drop); }
  void set_slow_ms(int ms) { slow_ms_ = ms; }
  // Called just before a fault fires (the audit log records it: a benchmark measures
  // recovery from this moment). Runs on the thread that fires.
  void set_before_fire(std::function<void(const elastic::FaultSpec&, int64_t step)> cb) { before_fire_ = std::move(cb); }
  bool empty() const { return specs_.empty(); }

  // An injection point of the training thread.
  void at(elastic::FaultPhase phase, int64_t step);
  // From the communicator's chunk hook (driving thread): phase=allreduce specs with
  // after_chunks = k fire once k chunks of the step's all-reduce went through.
  void on_chunk(uint64_t step, uint64_t chunks_done);

 private:
  void fire(size_t i, const char* where);
  std::vector<elastic::FaultSpec> specs_;
  std::vector<std::atomic<bool>> fired_;
  int64_t incarnation_ = 0;
  int slot_ = 0;
  std::atomic<int> rank_{-1};
  std::atomic<int64_t> max_redo_{-1}, prev_max_redo_{-1};
  bool eligible(elastic::FaultPhase phase, int64_t step) const;
  std::function<void()> drop_;
  std::function<void(const elastic::FaultSpec&, int64_t)> before_fire_;
  int slow_ms_ = 200;
};

}  // namespace rf::ddp
