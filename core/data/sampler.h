#pragma once
// Sampler — which samples make up each step, and which rank computes which of them.
//
// docs/protocol.md R3: the global batch of step s is a pure function of (seed, s), and its split
// over ranks a pure function of (rank, W). Recovery re-partitions a failed step over the
// new membership without changing its samples. Concretely:
//   epoch = s / steps_per_epoch, position = s % steps_per_epoch;
//   the epoch's order is a permutation of [0, n) drawn by Fisher–Yates from SplitMix64
//   seeded by (seed, epoch) — our own PRNG, so every platform gets the same batches;
//   batch s = order[position*B, min((position+1)*B, n)). With drop_last=false the last
//   batch of an epoch may be short; with drop_last=true it is dropped.
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace rf::data {

class Sampler {
 public:
  // Throws rf::InvalidInput when dataset_size < 1, global_batch < 1, or drop_last leaves
  // no step at all (dataset_size < global_batch).
  Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed, bool drop_last = false);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t dataset_size() const { return n_; }
  int64_t batch_size() const { return batch_; }

  // The sample indices of step `step` (>= 0), in the order every rank agrees on.
  std::vector<int64_t> global_batch(int64_t step) const;
  // This rank's contiguous slice of global_batch(step); may be empty when W > batch.
  std::vector<int64_t> local_batch(int64_t step, int rank, int world) const;

  // The slice [begin, end) of a batch of `batch` samples that `rank` of `world` computes:
  // contiguous ranges in rank order, the first batch % world ranks get one extra sample.
  static std::pair<int64_t, int64_t> partition(int64_t batch, int rank, int world);

  // The permutation of epoch `epoch` (exposed for tests and tools).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  int64_t n_, batch_;
  uint64_t seed_;
  bool drop_last_;
  int64_t steps_per_epoch_;
  // One cached epoch order: computing it costs O(n), so steps of the same epoch share it.
  // Guarded by mu_ so one Sampler may be used from several threads (in-process ranks).
  mutable std::mutex mu_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> cached_order_;
};

}  // namespace rf::data
