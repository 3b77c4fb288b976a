#pragma once
// What the loopback communicator's tests share (test_loopback_*.cpp).
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "comm/errors.h"
#include "tests/comm/inproc/loopback_communicator.h"

namespace rf::comm::inproc::testing {

using rf::Clock;

constexpr auto kBound = std::chrono::seconds(5);  // no wait of these tests gets near it

// Small pieces, so that the ring and the broadcast chain take many rounds here.
inline LoopbackOptions small_pieces() { return {.small_allreduce_bytes = 256, .chunk_bytes = 256, .flows = 2}; }

inline CommOptions options(int rank, int world, uint64_t generation) {
  CommOptions o;
  o.rank = rank;
  o.world = world;
  o.generation = generation;
  return o;
}

inline Buffer f32(std::vector<float>& v) { return Buffer{.data = v.data(), .count = v.size(), .dtype = DType::f32}; }

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// How a call ended.
struct Outcome {
  std::string kind = "none";  // "ok", "Aborted", "PeerFailed", "TimedOut", "other"
  int peer = -2;
  std::string what;
  double ms = 0;  // from `since`
};

template <typename F>
Outcome outcome_of(F&& f, Clock::time_point since = Clock::now()) {
  Outcome o;
  try {
    f();
    o.kind = "ok";
  } catch (const Aborted& e) {
    o = {"Aborted", e.peer(), e.what()};
  } catch (const PeerFailed& e) {
    o = {"PeerFailed", e.peer(), e.what()};
  } catch (const TimedOut& e) {
    o = {"TimedOut", e.peer(), e.what()};
  } catch (const std::exception& e) {
    o = {"other", -2, e.what()};
  }
  o.ms = std::chrono::duration<double, std::milli>(Clock::now() - since).count();
  return o;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// An in-memory bootstrap store.
class MemoryStore final : public BootstrapStore {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard lk(mu_);
    kv_[key] = value;
    cv_.notify_all();
  }
  std::vector<uint8_t> wait_get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return kv_.count(key) > 0; })) {
      CommErrorInfo i;
      i.collective = "bootstrap";
      i.cause = "no key " + key;
      throw TimedOut(i);
    }
    return kv_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> kv_;
};

}  // namespace rf::comm::inproc::testing
