#pragma once
// FaultInjector — the worker side of `--inject` (elastic/fault_spec.h grammar): the
// trainer calls at(phase, step) at each injection point and the chunk hook of the
// communicator calls on_chunk during all-reduces. A spec fires at most once, only in
// incarnation 0 of the process (a replacement must not repeat its predecessor's fault),
// when this worker's CURRENT rank and the step match. A spec without phase= fires at the
// start of the step (forward).
//   kill  SIGKILL self          stop  SIGSTOP self (D2: the lease expires); with for=,
//         the process freezes that long and goes on (a helper child sends SIGCONT)
//   hang  the calling thread blocks forever (the heartbeat thread goes on: D3 finds it)
//   exit  _exit(3)              drop  force-closes this rank's endpoints (the hook given)
//   gpu_hang  enqueues a kernel that never ends on the rank's compute stream (the process's
//         gpu hang action, set_gpu_hang_action) and returns: the host thread goes on, but
//         nothing queued behind it (the next NCCL all-reduce) ever starts on its GPU
//   disk  strikes rank 0's checkpoint writes (storage_fault): the first writes= of a step
//         >= step= wait delay= and fail with error= as a disk would (ckpt/storage_error.h)
//   slow  delays the step (a slow rank is not a failure): each of the spec's steps= steps
//         (default 1) from step=, by (factor - 1) x the median of this rank's last
//         kStepWindow step times that were not slowed, or by a fixed slow_ms (200 ms)
//         without factor= or while no step time is known yet. The trainer reports each
//         applied step's duration (step_took); a slowed step's own time is left out of the
//         window (step_took says why), so a long range keeps the rank's usual step time as
//         its reference. Each step of the range is delayed once: a redone step that was
//         delayed is not delayed again.
// Phases transfer/recovery match the step being redone (T+1) of a recovery.
// Once per job, not once per attempt: a step that is redone after a recovery does not
// fire its faults again (else a shrunk group, whose new rank R is another worker, would
// repeat the fault for ever). So training-phase specs of step s fire only while s is
// beyond every redone step seen so far, and transfer/recovery specs only in the first
// recovery that redoes s.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ckpt/storage_error.h"
#include "elastic/fault_spec.h"

namespace rf::ddp {

// The delay of one step slowed by `slow` (pure, unit-tested): (factor - 1) x the median of
// recent (durations of this rank's recent steps that were not slowed), or `fixed`
// without a factor or with no recent step yet.
std::chrono::nanoseconds slow_delay(const elastic::FaultSpec& slow, std::span<const std::chrono::nanoseconds> recent,
                                    std::chrono::nanoseconds fixed);

// gpu_hang's action in this process: enqueue, on the stream the model computes on, a kernel
// that never ends (ddp/gpu_hang.h), and return. Installed by a program once it knows its
// GPU (models/train_program.cpp); empty uninstalls. Without one (a worker on the CPU, which
// refuses gpu_hang before it starts: elastic::refuse_gpu_faults_on_cpu) a gpu_hang that
// fires throws rf::InvalidInput saying so.
void set_gpu_hang_action(std::function<void()> action);

class FaultInjector {
 public:
  FaultInjector() = default;
  FaultInjector(std::vector<elastic::FaultSpec> specs, int64_t incarnation, int slot);

  void set_rank(int rank) { rank_.store(rank); }
  // A plan arrived that resumes at step `redo` (T+1); fresh starts do not count.
  void on_plan(int64_t redo, bool fresh);
  void set_drop(std::function<void()> drop) { drop_ = std::move(drop); }
  // What kill, stop, exit and hang do instead of the signals, _exit and the endless wait: a
  // test running workers as threads of one process (tests/ddp/inproc) ends or parks the
  // calling thread itself. Empty: to this process.
  void set_process_fault(std::function<void(const elastic::FaultSpec&)> act) { process_fault_ = std::move(act); }
  void set_slow_ms(int ms) { slow_ms_ = std::chrono::milliseconds(ms); }
  // How a slowed step waits (default: poll; a test records the delays instead).
  void set_sleep(std::function<void(std::chrono::nanoseconds)> sleep) { sleep_ = std::move(sleep); }
  // The trainer: step was applied and took `d` from its start, injected delays included.
  void step_took(int64_t step, std::chrono::nanoseconds d);
  static constexpr size_t kStepWindow = 32;
  // Called just before a fault fires (the audit log records it: a benchmark measures
  // recovery from this moment). Runs on the thread that fires.
  void set_before_fire(std::function<void(const elastic::FaultSpec&, int64_t step)> cb) { before_fire_ = std::move(cb); }
  bool empty() const { return specs_.empty(); }

  // An injection point of the training thread.
  void at(elastic::FaultPhase phase, int64_t step);
  // The checkpoint of `step` is about to be saved by this worker (rank 0): the disk
  // specs' fault for its write (none: a default StorageFault). Each write counts against
  // a spec's writes=.
  ckpt::StorageFault storage_fault(int64_t step);
  // From the communicator's chunk hook (driving thread): phase=allreduce specs with
  // after_chunks = k fire once k chunks of the step's all-reduce went through.
  void on_chunk(uint64_t step, uint64_t chunks_done);

 private:
  void fire(size_t i, const char* where);
  void announce(size_t i, int64_t step, const char* where);
  void slow_step(size_t i, int64_t step, const char* where);
  bool slows(const elastic::FaultSpec& f, int64_t step) const;
  std::vector<elastic::FaultSpec> specs_;
  std::vector<std::atomic<bool>> fired_;
  std::vector<std::atomic<int64_t>> last_slowed_;  // per spec: the last step a slow spec delayed
  std::vector<int64_t> disk_writes_;               // per spec: checkpoint writes a disk spec struck
  int64_t incarnation_ = 0;
  int slot_ = 0;
  std::atomic<int> rank_{-1};
  std::atomic<int64_t> max_redo_{-1}, prev_max_redo_{-1};
  bool eligible(elastic::FaultPhase phase, int64_t step) const;
  std::function<void()> drop_;
  std::function<void(const elastic::FaultSpec&)> process_fault_;
  std::function<void(const elastic::FaultSpec&, int64_t)> before_fire_;
  std::chrono::nanoseconds slow_ms_ = std::chrono::milliseconds(200);
  std::function<void(std::chrono::nanoseconds)> sleep_;
  // slow_step runs on the training thread or comm's driving thread (after_chunks), step_took
  // on the training thread: both under mu_.
  std::mutex mu_;
  std::deque<std::chrono::nanoseconds> recent_;  // the last kStepWindow times of steps not slowed
  std::chrono::nanoseconds injected_{0};          // delays added to step injected_step_
  int64_t injected_step_ = -1;
  bool measures_steps_ = false;  // a factor= spec may fire here: step_took keeps the times
};

}  // namespace rf::ddp
