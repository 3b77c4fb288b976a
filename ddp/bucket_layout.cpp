#include "ddp/bucket_layout.h"

#include "base/error.h"
#include "base/str.h"
#include "comm/tag.h"

namespace rf::ddp {

BucketLayout make_bucket_layout(const std::vector<int64_t>& numels, size_t cap_bytes) {
  if (numels.empty()) throw InvalidInput("ddp bucket layout: the model has no parameters");
  if (cap_bytes == 0) throw InvalidInput("ddp bucket layout: bucket cap must be at least 1 byte");
  BucketLayout l;
  l.params.resize(numels.size());
  const int64_t cap_floats = static_cast<int64_t>(cap_bytes / sizeof(float));
  for (size_t k = numels.size(); k-- > 0;) {
    const int64_t n = numels[k];
    if (n <= 0) throw InvalidInput(str("ddp bucket layout: parameter ", k, " has ", n, " elements"));
    // Open a new bucket when the current one would overflow; a lone oversized parameter
    // still gets a bucket (never split: its gradient must be one contiguous view).
    if (l.bucket_floats.empty() || (l.bucket_floats.back() > 0 && l.bucket_floats.back() + n > cap_floats)) {
      l.bucket_floats.push_back(0);
      l.bucket_params.emplace_back();
    }
    const int b = l.num_buckets() - 1;
    l.params[k] = {b, l.bucket_floats.back(), n};
    l.bucket_floats.back() += n;
    l.bucket_params.back().push_back(static_cast<int>(k));
  }
  if (l.num_buckets() > static_cast<int>(comm::StepTag::kMaxUserOp) + 1)
    throw InvalidInput(str("ddp bucket layout: ", l.num_buckets(), " buckets, at most ",
                           comm::StepTag::kMaxUserOp + 1, " fit the tag; raise the bucket cap"));
  return l;
}

}  // namespace rf::ddp
