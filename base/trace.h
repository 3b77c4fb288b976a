#pragma once
// Tracer — one process's spans in Chrome trace event format (the JSON Perfetto and
// chrome://tracing open), written to a file as JSON lines while the process runs, so a
// process that is killed leaves every event up to its last flush (docs/trace.md).
//
// The hot path is the training thread's: span() copies a fixed-size record (names are
// string literals, arguments a fixed set of integers) into a ring reserved up front and
// publishes it with one release store. No allocation, no lock, no system call; a writer
// thread of its own drains the ring to the file every flush period (and flush() does it at
// once, before an injected fault kills the process). When the writer falls a whole ring
// behind, spans are dropped and counted, never waited for.
//
// Other threads (the heartbeat thread's revocations, rare) go through instant_any(): a
// mutex and a vector, off the hot path.
//
// Clock: wall-clock microseconds since the Unix epoch ("ts"), so the files of several
// processes on one host merge onto one timeline. Spans are measured with rf::Clock (steady)
// and converted with one offset taken when the tracer starts.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"

namespace rf {

// The integers a span carries into "args" (-1: absent).
struct TraceArgs {
  int64_t step = -1;
  int64_t generation = -1;
  int32_t rank = -1;
  int32_t bucket = -1;
};

class Tracer {
 public:
  // A worker's lanes ("tid" in the file): what its training thread does, then one per
  // gradient bucket (kComm + bucket), since the buckets' all-reduces overlap backward and
  // each other, so they cannot nest inside the training thread's spans.
  using Lane = int;
  static constexpr Lane kTrain = 0, kComm = 1;

  // path "" = disabled: every call is one branch. Throws rf::Error if the file cannot be
  // opened. capacity is rounded up to a power of two.
  explicit Tracer(const std::string& path = "", size_t capacity = size_t{1} << 16,
                  Duration flush_every = std::chrono::milliseconds(50));
  ~Tracer();  // drains the ring, closes the file
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return file_ != nullptr; }

  // One thread only (the owner: the training thread). name must outlive the tracer (a
  // string literal).
  void span(const char* name, Lane lane, TimePoint begin, TimePoint end, const TraceArgs& args = {}) {
    if (file_) push({name, lane, to_us(begin), to_us(end) - to_us(begin), args, 'X'});
  }
  void instant(const char* name, Lane lane, TimePoint at, const TraceArgs& args = {}) {
    if (file_) push({name, lane, to_us(at), 0, args, 'i'});
  }
  // Any thread, rare events: an instant with a free-text detail (JSON-escaped here).
  void instant_any(const std::string& name, const std::string& detail, const TraceArgs& args = {});
  // Any thread: writes everything recorded so far and fflushes it (before a fault fires).
  void flush();

  int64_t to_us(TimePoint t) const {
    return wall0_us_ + std::chrono::duration_cast<std::chrono::microseconds>(t - steady0_).count();
  }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Record {
    const char* name;
    Lane lane;
    int64_t ts_us, dur_us;
    TraceArgs args;
    char ph;
  };
  void push(const Record& r) {
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_.load(std::memory_order_acquire) >= ring_.size()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ring_[h & mask_] = r;
    head_.store(h + 1, std::memory_order_release);
  }
  void writer_loop();
  void drain();  // under write_mu_

  std::FILE* file_ = nullptr;
  std::vector<Record> ring_;
  uint64_t mask_ = 0;
  alignas(64) std::atomic<uint64_t> head_{0};  // the owner's
  alignas(64) std::atomic<uint64_t> tail_{0};  // the writer's
  std::atomic<uint64_t> dropped_{0};
  int64_t wall0_us_ = 0;
  TimePoint steady0_;
  std::mutex any_mu_;                   // instant_any's lines
  std::vector<std::string> any_lines_;
  std::mutex write_mu_;                 // the file and tail_ advance: writer thread or flush()
  std::string out_;                     // formatting buffer, reused
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  Duration flush_every_;
  std::thread writer_;
};

}  // namespace rf
