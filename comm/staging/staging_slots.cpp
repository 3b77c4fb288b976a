#include "comm/staging/staging_slots.h"

#include <algorithm>

#include "base/enforce.h"

namespace rf::comm::cuda {

size_t staging_capacity(size_t bytes) {
  constexpr size_t kGrain = size_t{64} << 10;
  return bytes == 0 ? kGrain : (bytes + kGrain - 1) / kGrain * kGrain;
}

StagingSlots::Pick StagingSlots::take(const StagingKey& key) {
  Pick p;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.capacity > 0 && !s.taken && s.key == key) {
      s.taken = true;
      s.last_use = ++clock_;
      p.slot = static_cast<int>(i);
      return p;
    }
  }
  // A new slot: make room under the budget, least recently used free slot first.
  const size_t need = staging_capacity(key.bytes);
  while (live_bytes_ + need > budget_) {
    int lru = -1;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.capacity == 0 || s.taken) continue;
      if (lru < 0 || s.last_use < slots_[static_cast<size_t>(lru)].last_use) lru = static_cast<int>(i);
    }
    if (lru < 0) break;  // every slot is in use: over budget rather than wrong
    Slot& s = slots_[static_cast<size_t>(lru)];
    live_bytes_ -= s.capacity;
    s = Slot{};
    p.evict.push_back(lru);
  }
  return p;
}

int StagingSlots::add(const StagingKey& key) {
  Slot s;
  s.key = key;
  s.capacity = staging_capacity(key.bytes);
  s.taken = true;
  s.last_use = ++clock_;
  live_bytes_ += s.capacity;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].capacity == 0) {
      slots_[i] = s;
      return static_cast<int>(i);
    }
  }
  slots_.push_back(s);
  return static_cast<int>(slots_.size() - 1);
}

void StagingSlots::give(int slot) {
  RF_ENFORCE(slot >= 0 && static_cast<size_t>(slot) < slots_.size() && slots_[static_cast<size_t>(slot)].taken,
             "staging slot ", slot, " given back but not taken");
  slots_[static_cast<size_t>(slot)].taken = false;
}

size_t StagingSlots::live_slots() const {
  return static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.capacity > 0; }));
}

}  // namespace rf::comm::cuda
