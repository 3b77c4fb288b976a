#pragma once
// Reducer — bucketed gradient all-reduce that overlaps backward (docs/architecture.md,
// one step's items 2-4; picotron's bucket.py is the model).
//
// Each parameter's gradient is a view into a flat bucket buffer (BucketLayout), so the
// all-reduce works on the gradients in place: no copies. A hook on every parameter fires
// when its gradient is final; when the last gradient of a bucket is final the bucket's
// all-reduce is started with tag (g, s, op of the bucket: OpPlan) while backward goes on.
// A layout with more buckets than the tag's op field numbers is refused (OpPlan). Buckets are
// started strictly in index order (a bucket that is ready early waits for its
// predecessors), because every rank must start the same collectives in the same order.
// The last bucket always runs in finish(), on the blocking path (nothing is left to
// overlap with it; the training thread drives the transport itself).
// finish() starts what is left, waits for all, sums the control block and divides every
// gradient by the GLOBAL sample count: the loss is a sum over local samples, so the
// update is the mean over the global batch for any W (R3). The tail of the last bucket is
// [control block (4 floats), loss sum].
//
// Device. The buckets live on the parameters' device (all on one device). Zeroing, the
// loss hand-off and the division run through that device's op table (fill, copy,
// divide_by) and only enqueue there; the division reads its divisor on the device, from
// the summed control block. The host sees the step's outcome only through the control
// tail: one asynchronous copy into pinned staging and one fence wait in finish() — no
// synchronize() and no blocking read per step (tests/ddp/test_reducer.cpp, "on a device",
// counts them). On the CPU these are the plain loops and memcpys they always were.
//
// Threads: begin_step, the hooks (they run inside backward) and finish all run on the
// training thread; the communicator moves the bytes on its own thread meanwhile.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "comm/communicator.h"
#include "core/device_runtime.h"
#include "core/storage.h"
#include "core/tensor.h"
#include "ddp/bucket_layout.h"
#include "ddp/control_block.h"
#include "ddp/op_plan.h"

namespace rf::ddp {

// Where the time of the last finished step went, from the training thread's side: is the
// overlap real (buckets started during backward, and done before finish() needed them)
// and how much communication stayed exposed (the time spent inside finish()). A handful
// of clock reads per step; ddp_bench reads it.
struct StepTimeline {
  TimePoint begin;                      // begin_step
  TimePoint first_start;                // first bucket handed to the communicator
  TimePoint finish_enter, finish_end;   // finish(): the only wait of the training thread
  int buckets = 0;
  int started_early = 0;                // buckets started during backward
  int done_at_finish = 0;               // ...of which complete when finish() began
  bool overlap = true;                  // the overlap setting this step ran with
};

// The overlap A/B schedule (TrainerConfig::overlap_ab_period = k > 0): overlap on for
// steps [0, k), off for [k, 2k), on for [2k, 3k), ... A pure function of the step number,
// so every rank switches at the same step without a message, and a step redone after a
// recovery runs with the setting it had the first time.
constexpr bool overlap_ab_on(int64_t step, int64_t period) { return (step / period) % 2 == 0; }

struct ReducerOptions {
  size_t bucket_cap_bytes = size_t{25} << 20;  // 25 MiB, as PyTorch DDP
  bool overlap = true;  // false: every bucket is started in finish(), after backward
                        // (changeable between steps: Reducer::set_overlap)
  // The last bucket (its all-reduce overlaps nothing) holds at most this many bytes of the
  // gradients backward finalises last (bucket_layout.h); 0 = off. See docs/ddp.md for the
  // measurement behind the default.
  size_t last_bucket_cap_bytes = size_t{256} << 10;
  // Buckets in registered memory (comm::allocate_registered: on the host a memfd,
  // pre-touched), named in every all-reduce, which comm's shared-memory path all-reduces
  // without copies through the ring (docs/comm.md); false: private memory from the caching
  // allocator (for comparisons). Every rank must choose the same. CPU parameters
  // only: a device's buckets are always that device's memory.
  bool shared_buckets = true;
};

class Reducer {
 public:
  // Re-points every parameter's gradient at its bucket (existing values are dropped) and
  // registers the hooks. The parameters must outlive the reducer. Throws rf::InvalidInput
  // for a parameter that is not a leaf requiring grad, and for a layout with more buckets
  // than OpPlan::kMaxBuckets (raise bucket_cap_bytes).
  Reducer(const std::vector<NamedTensor>& params, ReducerOptions options = {});
  ~Reducer();  // the hooks stay registered but do nothing afterwards
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before forward of step `step`: zeroes the gradients, writes this rank's control block
  // and arms the hooks for `comm` (which must live until finish() or abandon()).
  void begin_step(comm::Communicator& comm, uint64_t step, const ControlBlock& local);
  // After forward: this rank's loss (a sum over its samples; one value on the gradients'
  // device), copied on the device into the control tail, so every rank learns the global
  // mean loss without another collective and the host never waits for it. Throws
  // rf::InvalidInput for a tensor of more than one value or on another device.
  void set_local_loss(const Tensor& loss_sum);
  // After backward: starts the remaining buckets, waits for every bucket, and divides the
  // gradients by the global sample count. Returns the control block summed over ranks.
  // A communication failure is rethrown (comm::CommError); the gradients are then
  // incomplete and must not be applied (R1). Throws rf::Error when the global count is 0
  // (before any division: the gradients are the sums, all zero).
  ControlBlock finish();
  // Overlap on or off from the next begin_step on (the step in flight keeps the setting it
  // began with, so a step never mixes the two). Results are bitwise the same either way:
  // the same buckets are all-reduced with the same tags in the same order, only when they
  // start differs (tests/ddp reducer_mp_test "ab"). For paired A/B timing in one job.
  void set_overlap(bool on) { opt_.overlap = on; }
  bool overlap() const { return opt_.overlap; }
  // After a failure: forgets the step's outstanding work (the communicator, aborted or
  // poisoned, owns finishing it) so the next begin_step starts clean.
  void abandon();

  // Mean loss over the global batch of the last finished step (same bits on every rank).
  double global_loss() const { return global_loss_; }
  const BucketLayout& layout() const { return layout_; }
  const OpPlan& ops() const { return ops_; }
  // For exact mode (ddp/exact_reducer.h), which never calls begin_step: it points the
  // gradients at buffers of its own for each micro-shard, then back at the buckets
  // (bucket_storage), and writes the rounded sums there (gradients: bucket b's floats); its
  // integer buckets are registered memory when these are (shared_buckets).
  float* gradients(int b) const { return buf(b); }
  const std::shared_ptr<Storage>& bucket_storage(int b) const { return buffers_[b]; }
  bool shared_buckets() const { return opt_.shared_buckets; }
  int num_buckets() const { return layout_.num_buckets(); }
  // Buckets started before finish() in the last step (how much overlapped backward).
  int started_during_backward() const { return timeline_.started_early; }
  const StepTimeline& timeline() const { return timeline_; }
  // Bucket b's all-reduce in the last step: when it was handed to the communicator, and
  // when the training thread saw it complete (a bucket done during backward is seen at
  // finish(): its end is an upper bound). For the trace (base/trace.h).
  std::pair<TimePoint, TimePoint> bucket_times(int b) const { return {bucket_start_[b], bucket_done_[b]}; }
  // The parameters' device: where the buckets live, and where the trainer puts each batch.
  Device device() const { return device_; }

 private:
  void zero_gradients();  // every bucket's gradients (the control tail is left alone)
  void on_grad_ready(int param);
  void start_ready_buckets();
  void start_bucket(int b);

  ReducerOptions opt_;
  Device device_;        // the parameters' (and so the buckets') device
  DeviceRuntime* rt_;    // its runtime, looked up once (before layout_: the buckets need it)
  BucketLayout layout_;
  OpPlan ops_;  // after layout_: made from it
  // One per bucket (the last also holds the control tail). Shared with the parameters,
  // whose gradients view them, so a parameter never points at freed memory (a registered
  // bucket is owned by the Storage that wraps it).
  std::vector<std::shared_ptr<Storage>> buffers_;
  std::vector<size_t> buffer_floats_;
  std::vector<const comm::RegisteredMemory*> registered_;  // per bucket; null: private memory
  float* buf(int b) const { return buffers_[b]->data<float>(); }
  float* tail() const;  // the control tail, device memory at the end of the last bucket
  float* tail_host_ = nullptr;  // kTail floats of host staging: the summed tail, each finish()
  Fence tail_fence_;
  comm::Buffer whole(int b) const;  // bucket b as the all-reduce sees it, registration included
  comm::Stream stream() const;     // the device's stream for device buckets, null on the CPU
  std::vector<int> pending_;                 // gradients not yet final, per bucket
  std::vector<comm::WorkPtr> work_;
  comm::Communicator* comm_ = nullptr;  // armed between begin_step and finish/abandon
  uint64_t step_ = 0;
  int next_start_ = 0;
  std::vector<TimePoint> bucket_start_, bucket_done_;  // per bucket, of the step in flight or the last one
  StepTimeline timeline_;  // of the step in flight, then of the last one; .overlap latches opt_.overlap
  double global_loss_ = 0.0;
  // The hooks outlive the reducer (they belong to the parameters): they reach it through
  // this cell, which the destructor clears.
  std::shared_ptr<Reducer*> self_;
};

}  // namespace rf::ddp
