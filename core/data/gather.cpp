#include <cstring>

#include "base/error.h"
#include "base/str.h"
#include "core/data/dataset.h"

namespace rf::data {

void gather_batch(const Dataset& ds, std::span<const int64_t> indices, float* images_out, int32_t* labels_out) {
  const int64_t d = ds.sample_size();
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t idx = indices[i];
    if (idx < 0 || idx >= ds.n) {
      throw rf::InvalidInput(rf::str("gather_batch: sample index ", idx, " (position ", i,
                                     " of the batch) is outside the dataset [0, ", ds.n, ")"));
    }
    std::memcpy(images_out + static_cast<int64_t>(i) * d, ds.images.data() + idx * d,
                static_cast<size_t>(d) * sizeof(float));
    labels_out[i] = ds.labels[static_cast<size_t>(idx)];
  }
}

}  // namespace rf::data
