#pragma once
// BucketLayout — which parameter's gradient lives where (DESIGN.md data path, step 2).
//
// Parameters are taken in REVERSE registration order (the last layer first: backward
// finalises its gradients first) and packed into buckets of at most `cap_bytes` each; a
// parameter larger than the cap gets a bucket of its own. Bucket b's gradients are one
// flat float buffer, each parameter's gradient a view at `offset` into it. The last bucket
// (the highest index, launched last) also carries the control block (R5) after its
// gradients. Pure: no tensors, only sizes, so it is unit-tested on its own.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rf::ddp {

struct ParamSlot {
  int bucket = 0;
  int64_t offset = 0;  // in floats, inside the bucket's buffer
  int64_t numel = 0;
};

struct BucketLayout {
  std::vector<ParamSlot> params;                 // indexed like the registration order
  std::vector<int64_t> bucket_floats;            // gradient floats per bucket
  std::vector<std::vector<int>> bucket_params;   // parameter indices per bucket
  int num_buckets() const { return static_cast<int>(bucket_floats.size()); }
};

// numels: each parameter's element count, in registration order. Throws rf::InvalidInput
// for an empty list, a parameter of no elements, a zero cap, or more buckets than the
// tag's op field can name (comm::StepTag::kMaxUserOp + 1).
BucketLayout make_bucket_layout(const std::vector<int64_t>& numels, size_t cap_bytes);

}  // namespace rf::ddp
