#pragma once
// StagingQueue — the order in which staged collectives reach the host communicator (pure;
// comm/cuda/device_staging.cpp is its shell). A device buffer's collective starts on the
// host only once its copy to host staging is done, and copies finish in the order they
// were enqueued on the stream, but they are noticed by whoever polls, in any order. The
// host communicator runs collectives in the order they are started, and every rank must
// start the same ones in the same order: so a staged collective may start only when every
// one enqueued before it has started. Ids are handed out in enqueue order.
#include <cstddef>
#include <cstdint>
#include <deque>

namespace rf::comm::cuda {

class StagingQueue {
 public:
  // A new collective, not started yet; its id (increasing).
  uint64_t enqueue() {
    queue_.push_back({next_, false});
    return next_++;
  }
  // Its copy to the host is done (may be said of any queued id, in any order).
  void copied(uint64_t id) {
    for (auto& e : queue_)
      if (e.id == id) e.copied = true;
  }
  // The next collective to start now: the oldest not started, if its copy is done. Call
  // until it returns false, starting each one returned (popped as it is returned).
  bool next_startable(uint64_t* id) {
    if (queue_.empty() || !queue_.front().copied) return false;
    *id = queue_.front().id;
    queue_.pop_front();
    return true;
  }
  // A collective abandoned before it started (its Work destroyed): it will never start,
  // and those after it must not wait for it.
  void drop(uint64_t id) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->id == id) {
        queue_.erase(it);
        return;
      }
  }
  bool empty() const { return queue_.empty(); }  // every enqueued one started or dropped
  size_t waiting() const { return queue_.size(); }

 private:
  struct Entry {
    uint64_t id;
    bool copied;
  };
  std::deque<Entry> queue_;
  uint64_t next_ = 0;
};

}  // namespace rf::comm::cuda
