#pragma once
// OpPlan — the op numbers of a training step's collectives: the one place ddp chooses the
// op field of comm::StepTag (a message is delivered only into the collective whose
// (generation, step, op, chunk) it was sent with, so two collectives of one step must
// never share an op).
//
//   op  0 .. B-1           bucket b's all-reduce (B = the layout's bucket count); in exact
//                          mode the integer all-reduce of the same bucket (ddp/exact_reducer.h)
//   op  B                  exact mode: the all-gather of each tensor's largest |gradient|
//   op  252                the state transfer's size message   (recovery step 6)
//   op  253                the state transfer's image          (recovery step 6)
//   op  254                the digest all-gather               (recovery step 7, verify_every)
//   op  255                comm's own (StepTag::kInternalOp: hello, farewells)
//
// The trainer's ops sit at the top of the user range, fixed whatever the model, so a
// bucket's op is its index (as the flight recorder and comm's errors print it). The op
// field has 8 bits, and the tag's other 56 are spoken for (generation, step, chunk), so a
// wider op would shorten a job's generations, steps or ring. With the 25 MiB default cap
// 252 buckets hold 6.6 GB of gradients; a layout with more buckets is refused when the
// reducer is built (raise the cap: fewer, larger buckets), never left to share a tag with
// the trainer's collectives.
#include <cstddef>
#include <cstdint>

#include "comm/tag.h"
#include "comm/types.h"
#include "ddp/bucket_layout.h"

namespace rf::ddp {

class OpPlan {
 public:
  static constexpr uint32_t kTransferSize = comm::StepTag::kMaxUserOp - 2;
  static constexpr uint32_t kTransferImage = comm::StepTag::kMaxUserOp - 1;
  static constexpr uint32_t kVerify = comm::StepTag::kMaxUserOp;
  static constexpr int kMaxBuckets = static_cast<int>(kTransferSize);  // buckets take 0 .. kMaxBuckets-1
  static_assert(kTransferSize < kTransferImage && kTransferImage < kVerify && kVerify < comm::StepTag::kInternalOp,
                "the trainer's ops are distinct, above every bucket and below comm's own");

  // Throws rf::InvalidInput when the layout has more than kMaxBuckets buckets, naming the
  // count, the limit, the cap it was made with (`cap_bytes`) and the cap it needs at least.
  OpPlan(const BucketLayout& layout, size_t cap_bytes);

  int num_buckets() const { return num_buckets_; }
  comm::OpId bucket(uint64_t step, int b) const;  // RF_ENFORCE: 0 <= b < num_buckets()
  static comm::OpId transfer_size(uint64_t step) { return {step, kTransferSize}; }
  static comm::OpId transfer_image(uint64_t step) { return {step, kTransferImage}; }
  static comm::OpId verify(uint64_t step) { return {step, kVerify}; }
  // Exact mode's scales (op B). RF_ENFORCE: B < kMaxBuckets (ExactReducer refuses a layout
  // without that free op first).
  comm::OpId exact_scales(uint64_t step) const;

 private:
  int num_buckets_ = 0;
};

}  // namespace rf::ddp
