#pragma once
// ExactReducer — exact mode's gradient sum (docs/exact.md, docs/protocol.md R7): the same
// bits for any number of ranks and any membership history.
//
// The global batch of a step is cut into M micro-shards (shard j of n samples is
// Sampler::partition(n, j, M)); rank r of W computes the contiguous shards
// Sampler::partition(M, r, W), each forward and backward alone, so a shard's gradient has
// the same bits whichever rank computes it. Each shard's backward writes into a buffer of its
// own (the parameters' gradients are pointed at it, laid out as the Reducer's buckets one
// after another), which is kept; finish() then
//   1. all-gathers every tensor's largest |g| over this rank's shards (op B, OpPlan) and
//      takes the maximum: the same on every rank, in any order. A NaN or infinite gradient
//      or loss on any rank throws NonFiniteGradient on every rank, naming the tensor;
//   2. converts every shard's gradients to int64 under the tensor's scale and sums them
//      (ddp/fixed_point.h), then all-reduces the integers bucket by bucket (op b, the
//      bucket's own) with the control block as exact integers in the last bucket's tail;
//   3. rounds each sum to float once, divided by the global sample count, into the
//      Reducer's buckets, where the gradients point again for the optimizer.
// The shard's loss sums travel the same way (one more tensor), so the step's mean loss has
// the same bits for every W too. Nothing overlaps backward: the scales need every shard.
// CPU parameters only (the constructor says so for others).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "ddp/control_block.h"
#include "ddp/reducer.h"

namespace rf::ddp {

// A NaN or infinite gradient (or loss) in exact mode: thrown by finish() on every rank of
// the step alike, so the job stops with it instead of applying it.
class NonFiniteGradient : public Error {
 public:
  using Error::Error;
};

class ExactReducer {
 public:
  // `reducer` holds the gradients the optimizer reads (its buckets) and must outlive this;
  // `params` are the reducer's, in registration order (they must outlive this too). Throws
  // rf::InvalidInput for micro_shards < 1, parameters not on the CPU, or a layout with no op
  // left for the scales (OpPlan::kMaxBuckets buckets).
  ExactReducer(Reducer& reducer, const std::vector<NamedTensor>& params, int micro_shards);
  ~ExactReducer();
  ExactReducer(const ExactReducer&) = delete;
  ExactReducer& operator=(const ExactReducer&) = delete;

  int micro_shards() const { return m_; }
  // Before the first shard of `step`: `local` is this rank's control block, `shards` how
  // many micro-shards it computes (0 when W > M leaves it none).
  void begin_step(comm::Communicator& comm, uint64_t step, const ControlBlock& local, int shards);
  // Before each shard's forward: the gradients point at the shard's own buffer, zeroed.
  void begin_shard();
  // After that shard's backward: its gradients and its loss (a sum over its samples, one
  // value) are kept.
  void end_shard(const Tensor& loss_sum);
  // A shard of no samples (a short last batch with fewer samples than M): zero gradients.
  void end_empty_shard();
  // After the last shard: the exact sum into the gradients, divided by the global sample
  // count. Returns the summed control block. comm::CommError as Reducer::finish (nothing to
  // apply); NonFiniteGradient; rf::Error when the global count is 0.
  ControlBlock finish();
  // After a failure: the step is forgotten and the gradients point at the buckets again.
  void abandon();
  double global_loss() const { return global_loss_; }

 private:
  struct Segment {        // one parameter
    std::string name;
    Tensor param;
    int bucket = 0;
    int64_t offset = 0;   // in the bucket
    int64_t flat = 0;     // in a kept shard (the buckets one after another)
    int64_t numel = 0;
  };
  std::vector<float> agree_scales(int64_t step);
  void sum_integers(const std::vector<int>& shifts);
  void allreduce_integers(uint64_t step);
  ControlBlock round_into_gradients(const std::vector<int>& shifts);
  const float* kept(int k) const { return kept_[k]->data<float>(); }
  comm::Buffer int_buffer(int b) const;

  Reducer& red_;
  int m_;
  std::vector<Segment> params_;
  int64_t flat_floats_ = 0;
  // Per bucket, its integer sums (the last bucket's end with the tail: the control block, then
  // the loss): registered memory when the reducer's buckets are, else plain.
  std::vector<int64_t*> ints_;
  std::vector<size_t> int_counts_;
  std::vector<std::shared_ptr<comm::RegisteredMemory>> registered_;
  std::vector<std::vector<int64_t>> plain_;
  void point_gradients_at(const std::shared_ptr<Storage>& shard);  // null: the buckets
  std::vector<std::shared_ptr<Storage>> kept_;  // per shard of the step, its gradients (reused)
  std::vector<float> losses_;             // per shard of the step
  std::vector<float> gathered_;           // W x (tensors + 1) largest |g|
  comm::Communicator* comm_ = nullptr;
  uint64_t step_ = 0;
  int shards_ = 0, done_ = 0;
  ControlBlock local_;
  double global_loss_ = 0.0;
};

}  // namespace rf::ddp
