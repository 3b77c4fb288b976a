#pragma once
// BucketLayout — which parameter's gradient lives where (docs/architecture.md, one step's
// item 2).
//
// Parameters are taken in REVERSE registration order (the last layer first: backward
// finalises its gradients first) and packed into buckets of at most `cap_bytes` each; a
// parameter larger than the cap gets a bucket of its own. Bucket b's gradients are one
// flat float buffer, each parameter's gradient a view at `offset` into it. The last bucket
// (the highest index, launched last) also carries the control block (R5) after its
// gradients. Pure: no tensors, only sizes, so it is unit-tested on its own.
//
// The last bucket is special: its gradients are final only at the very end of backward,
// so its all-reduce overlaps nothing — it is the exposed part of communication. With
// `last_cap_bytes` > 0 the last bucket is kept small: it takes the parameters backward
// finalises LAST (the first registered) while they fit in last_cap_bytes, and the rest
// are packed as above into the buckets before it, which overlap the first layers'
// backward. (For the reference CNN: fc2+fc1 overlap the conv layers' backward, the
// 53 KB of conv gradients stay exposed.) When the first parameter alone does not fit, or
// every parameter does, the layout is the plain one.
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
// for an empty list, a parameter of no elements, or a zero cap. (How many buckets fit the
// tag is OpPlan's to say, ddp/op_plan.h.) last_cap_bytes: see above (0 = off; it never
// exceeds cap_bytes).
BucketLayout make_bucket_layout(const std::vector<int64_t>& numels, size_t cap_bytes, size_t last_cap_bytes = 0);

}  // namespace rf::ddp
