#pragma once
// StagingSlots — which pinned host staging a device collective uses (the pure core of the
// UCX fallback's staging pool, comm/cuda/device_staging.cpp; no CUDA here, unit-tested).
//
// A slot is keyed by the device buffer it stages, (device, address, bytes): a gradient
// bucket is the same device buffer every step, so it finds its own slot again and, after
// the first step, nothing is allocated, whatever the timing of the buckets (a pool that
// handed any free slot to any request would re-key slots whenever one bucket finished
// before the next started, and allocate again in a later step). Several outstanding
// collectives each hold their own slot. Slots outlive communicators: the next generation
// finds them too.
//
// Memory is bounded by a budget: before a new slot is made, free slots are evicted, least
// recently used first, until it fits; when every slot is in use, it is made anyway
// (correctness before the budget: the caller holds them all).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rf::comm::cuda {

struct StagingKey {
  int device = 0;
  uintptr_t address = 0;
  size_t bytes = 0;
  bool operator==(const StagingKey&) const = default;
};

// The capacity a slot of `bytes` gets: whole 64 KiB (cudaHostRegister and the memfd work
// in pages; a coarser grain keeps odd sizes from fragmenting). Never 0.
size_t staging_capacity(size_t bytes);

class StagingSlots {
 public:
  explicit StagingSlots(size_t budget_bytes) : budget_(budget_bytes) {}

  struct Pick {
    int slot = -1;             // the slot to use (taken), or -1: make one, then add()
    std::vector<int> evict;    // free slots to free first (already removed from the pool)
  };
  // The free slot keyed `key` (marked taken), or what to evict before add() makes one.
  Pick take(const StagingKey& key);
  // Records a new slot of staging_capacity(key.bytes) for `key`, taken; returns its index.
  // Indices of evicted slots are reused.
  int add(const StagingKey& key);
  // The slot is free again (its staging may be handed to the next collective on its key).
  void give(int slot);

  size_t capacity(int slot) const { return slots_[static_cast<size_t>(slot)].capacity; }
  bool taken(int slot) const { return slots_[static_cast<size_t>(slot)].taken; }
  size_t live_slots() const;
  size_t live_bytes() const { return live_bytes_; }

 private:
  struct Slot {
    StagingKey key;
    size_t capacity = 0;  // 0: an evicted index, free for add() to reuse
    bool taken = false;
    uint64_t last_use = 0;
  };
  size_t budget_;
  size_t live_bytes_ = 0;
  uint64_t clock_ = 0;
  std::vector<Slot> slots_;
};

}  // namespace rf::comm::cuda
