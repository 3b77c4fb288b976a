#include "ddp/activity.h"

#include "base/str.h"

namespace rf::ddp {

void ActivityBoard::compute(Region region, int64_t index, Duration bound) {
  region_.store(static_cast<int>(region), std::memory_order_relaxed);
  index_.store(index, std::memory_order_relaxed);
  bound_ns_.store(ns(bound), std::memory_order_relaxed);
  set_kind(elastic::Activity::Compute);
}

void ActivityBoard::idle() { set_kind(elastic::Activity::Idle); }

void ActivityBoard::set_kind(elastic::Activity::Kind k) {
  since_ns_.store(ns(Clock::now().time_since_epoch()), std::memory_order_relaxed);
  kind_.store(k, std::memory_order_release);
}

elastic::Activity ActivityBoard::read(TimePoint now, Duration frozen_total) {
  elastic::Activity a;
  a.kind = static_cast<elastic::Activity::Kind>(kind_.load(std::memory_order_acquire));
  const int64_t since = since_ns_.load(std::memory_order_relaxed);
  const int64_t runnable = cpu_.runnable_ns();
  const int64_t frozen = ns(frozen_total);
  if (since != region_since_) {  // an activity this reader has not seen yet
    region_since_ = since;
    if (runnable >= 0) region_base_ = prev_runnable_ >= 0 ? prev_runnable_ : runnable;
    frozen_base_ = prev_frozen_ >= 0 ? prev_frozen_ : frozen;
  }
  if (runnable >= 0) prev_runnable_ = runnable;
  prev_frozen_ = frozen;
  if (a.kind == elastic::Activity::Idle) return a;
  const int64_t now_ns = ns(now.time_since_epoch());
  a.elapsed = std::chrono::nanoseconds(now_ns > since ? now_ns - since : 0);
  if (runnable >= 0) a.runnable = std::chrono::nanoseconds(std::max<int64_t>(0, runnable - region_base_));
  a.frozen = std::chrono::nanoseconds(std::max<int64_t>(0, frozen - frozen_base_));
  a.bound = std::chrono::nanoseconds(bound_ns_.load(std::memory_order_relaxed));
  const int64_t index = index_.load(std::memory_order_relaxed);
  a.where = static_cast<Region>(region_.load(std::memory_order_relaxed)) == Region::Step
                ? str("step ", index)
                : str("recovery to generation ", index);
  return a;
}

}  // namespace rf::ddp
