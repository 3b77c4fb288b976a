#include "ddp/op_plan.h"

#include <numeric>

#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {

OpPlan::OpPlan(const BucketLayout& layout, size_t cap_bytes) : num_buckets_(layout.num_buckets()) {
  if (num_buckets_ <= kMaxBuckets) return;
  const int64_t floats = std::accumulate(layout.bucket_floats.begin(), layout.bucket_floats.end(), int64_t{0});
  const int64_t bytes = floats * static_cast<int64_t>(sizeof(float));
  // A lower bound, in whole floats (a cap counts whole gradients): buckets never split a
  // parameter, so an uneven model may need more.
  const int64_t need = (floats + kMaxBuckets - 1) / kMaxBuckets * static_cast<int64_t>(sizeof(float));
  throw InvalidInput(str("ddp reducer: the bucket layout has ", num_buckets_, " buckets (bucket cap ", cap_bytes,
                         " bytes), but at most ", kMaxBuckets, " fit the tag's op field (", comm::StepTag::kOpBits,
                         " bits: ops ", kMaxBuckets, "-", kVerify, " are the trainer's, ", comm::StepTag::kInternalOp,
                         " comm's); raise the bucket cap (ReducerOptions::bucket_cap_bytes): ", bytes,
                         " bytes of gradients need at least ", need, " bytes per bucket"));
}

comm::OpId OpPlan::exact_scales(uint64_t step) const {
  RF_ENFORCE(num_buckets_ < kMaxBuckets, "no op left for the exact scales: ", num_buckets_, " buckets");
  return {step, static_cast<uint32_t>(num_buckets_)};
}

comm::OpId OpPlan::bucket(uint64_t step, int b) const {
  RF_ENFORCE(b >= 0 && b < num_buckets_, "bucket ", b, " of ", num_buckets_);
  return {step, static_cast<uint32_t>(b)};
}

}  // namespace rf::ddp
