#include "ddp/bucket_layout.h"

#include <algorithm>

#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {

BucketLayout make_bucket_layout(const std::vector<int64_t>& numels, size_t cap_bytes, size_t last_cap_bytes) {
  if (numels.empty()) throw InvalidInput("ddp bucket layout: the model has no parameters");
  if (cap_bytes == 0) throw InvalidInput("ddp bucket layout: bucket cap must be at least 1 byte");
  for (size_t k = 0; k < numels.size(); ++k)
    if (numels[k] <= 0) throw InvalidInput(str("ddp bucket layout: parameter ", k, " has ", numels[k], " elements"));
  BucketLayout l;
  l.params.resize(numels.size());
  const int64_t cap_floats = static_cast<int64_t>(cap_bytes / sizeof(float));
  // The small last bucket: parameters 0 .. tail-1 (the first registered, final last).
  const int64_t last_floats = static_cast<int64_t>(std::min(last_cap_bytes, cap_bytes) / sizeof(float));
  size_t tail = 0;
  for (int64_t sum = 0; tail < numels.size() && sum + numels[tail] <= last_floats; ++tail) sum += numels[tail];
  if (tail == numels.size()) tail = 0;  // it would hold everything: the plain layout
  for (size_t k = numels.size(); k-- > tail;) {
    const int64_t n = numels[k];
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
  if (tail > 0) {
    l.bucket_floats.push_back(0);
    l.bucket_params.emplace_back();
    const int b = l.num_buckets() - 1;
    for (size_t k = tail; k-- > 0;) {
      l.params[k] = {b, l.bucket_floats.back(), numels[k]};
      l.bucket_floats.back() += numels[k];
      l.bucket_params.back().push_back(static_cast<int>(k));
    }
  }
  return l;
}

}  // namespace rf::ddp
