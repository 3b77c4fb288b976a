#include "ddp/stall_bound.h"

#include <algorithm>

#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {

StallBound::StallBound(StallBoundOptions options) : opt_(options) {
  if (opt_.floor <= Duration::zero() || opt_.ceiling < opt_.floor)
    throw InvalidInput(str("stall bound: the floor (", std::chrono::duration<double>(opt_.floor).count(),
                           " s) must be positive and at most the ceiling (",
                           std::chrono::duration<double>(opt_.ceiling).count(), " s)"));
  if (opt_.step_factor <= 0 || opt_.window == 0 || opt_.transfer_bytes_per_s <= 0)
    throw InvalidInput("stall bound: step_factor, window and transfer_bytes_per_s must be positive");
  ring_.reserve(opt_.window);
  scratch_.reserve(opt_.window);
}

void StallBound::observe(Duration step_time) {
  if (ring_.size() < opt_.window) ring_.push_back(step_time);
  else ring_[next_] = step_time;
  next_ = (next_ + 1) % opt_.window;
  ++count_;
}

Duration StallBound::median_step() const {
  if (ring_.empty()) return Duration::zero();
  scratch_.assign(ring_.begin(), ring_.end());
  auto mid = scratch_.begin() + static_cast<std::ptrdiff_t>(scratch_.size() / 2);
  std::nth_element(scratch_.begin(), mid, scratch_.end());
  return *mid;
}

Duration StallBound::clamp(Duration d) const { return std::clamp(d, opt_.floor, opt_.ceiling); }

Duration StallBound::step_bound() const {
  if (count_ < opt_.warmup) return opt_.ceiling;
  return clamp(std::chrono::duration_cast<Duration>(median_step() * opt_.step_factor));
}

Duration StallBound::recovery_bound(uint64_t state_bytes) const {
  const auto transfer = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(static_cast<double>(state_bytes) / opt_.transfer_bytes_per_s));
  return clamp(opt_.floor + transfer);
}

}  // namespace rf::ddp
