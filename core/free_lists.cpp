#include "core/free_lists.h"

namespace rf {

size_t FreeLists::round(size_t bytes) {
  const size_t g = bytes < (64u << 10) ? 64 : 4096;
  return bytes == 0 ? g : (bytes + g - 1) / g * g;
}

void* FreeLists::take(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find(n);
  if (it == free_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  ++stats_.reused_blocks;
  stats_.cached_bytes -= n;
  stats_.live_bytes += n;
  return p;
}

void FreeLists::note_fresh(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.fresh_blocks;
  stats_.live_bytes += n;
}

void FreeLists::put(void* p, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  free_[n].push_back(p);
  stats_.cached_bytes += n;
  stats_.live_bytes -= n;
}

FreeLists::Stats FreeLists::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace rf
