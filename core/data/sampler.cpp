#include "core/data/sampler.h"

#include <algorithm>

#include "base/error.h"
#include "base/str.h"
#include "core/data/prng.h"

namespace rf::data {

Sampler::Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed, bool drop_last)
    : n_(dataset_size), batch_(global_batch), seed_(seed), drop_last_(drop_last) {
  if (n_ < 1) throw rf::InvalidInput(rf::str("Sampler: dataset size must be >= 1, got ", n_));
  if (batch_ < 1) throw rf::InvalidInput(rf::str("Sampler: global batch must be >= 1, got ", batch_));
  steps_per_epoch_ = drop_last_ ? n_ / batch_ : (n_ + batch_ - 1) / batch_;
  if (steps_per_epoch_ == 0) {
    throw rf::InvalidInput(rf::str("Sampler: drop_last with a dataset of ", n_,
                                   " samples and a global batch of ", batch_, " leaves no step"));
  }
}

std::vector<int64_t> Sampler::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) order[static_cast<size_t>(i)] = i;
  // Fisher–Yates from the back: position i swaps with a uniform j in [0, i].
  SplitMix64 g = substream(seed_, static_cast<uint64_t>(epoch));
  for (int64_t i = n_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(g.below(static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

std::vector<int64_t> Sampler::global_batch(int64_t step) const {
  if (step < 0) throw rf::InvalidInput(rf::str("Sampler: step must be >= 0, got ", step));
  const int64_t epoch = step / steps_per_epoch_;
  const int64_t pos = step % steps_per_epoch_;
  std::shared_ptr<const std::vector<int64_t>> order;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_epoch_ != epoch || !cached_order_) {
      cached_order_ = std::make_shared<const std::vector<int64_t>>(epoch_order(epoch));
      cached_epoch_ = epoch;
    }
    order = cached_order_;
  }
  const int64_t begin = pos * batch_;
  const int64_t end = std::min(begin + batch_, n_);
  return std::vector<int64_t>(order->begin() + begin, order->begin() + end);
}

std::pair<int64_t, int64_t> Sampler::partition(int64_t batch, int rank, int world) {
  if (world < 1) throw rf::InvalidInput(rf::str("Sampler::partition: world size must be >= 1, got ", world));
  if (rank < 0 || rank >= world) {
    throw rf::InvalidInput(rf::str("Sampler::partition: rank ", rank, " is outside [0, ", world, ")"));
  }
  if (batch < 0) throw rf::InvalidInput(rf::str("Sampler::partition: batch must be >= 0, got ", batch));
  const int64_t base = batch / world;
  const int64_t extra = batch % world;  // the first `extra` ranks take one more sample
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  const int64_t end = begin + base + (rank < extra ? 1 : 0);
  return {begin, end};
}

std::vector<int64_t> Sampler::local_batch(int64_t step, int rank, int world) const {
  std::vector<int64_t> batch = global_batch(step);
  const auto [begin, end] = partition(static_cast<int64_t>(batch.size()), rank, world);
  return std::vector<int64_t>(batch.begin() + begin, batch.begin() + end);
}

}  // namespace rf::data
