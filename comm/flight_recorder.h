#pragma once
// FlightRecorder — the last N collective records of one rank (operation, tag, bytes,
// state, start and end times, the peer and chunk waited on), dumped as JSON lines when a
// collective fails, so "rank 2 waited 1.0 s in all-reduce g=3 s=812 op=1 for chunk 5 from
// rank 1" is one read. Thread-safe; a ring buffer, so it never allocates after creation
// except for the (rare) cause strings.
//
// Each record also carries the phase label current when it started (set_phase_label):
// what the process was doing around the collective, e.g. the trainer's "train" or a
// recovery step ("connect", "transfer", "verify"), so a dump says which part of a
// recovery a failed collective belonged to. comm only stores the text.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace rf::comm {

struct FlightRecord {
  enum class State : uint8_t { started, done, failed };
  uint64_t seq = 0;
  const char* collective = "";
  uint64_t generation = 0;
  uint64_t step = 0;
  uint32_t op = 0;
  int64_t chunk = -1;      // last chunk waited on (-1: none yet)
  int peer = -1;           // peer waited on when it ended or failed (-1: none)
  uint64_t bytes = 0;
  State state = State::started;
  int64_t start_us = 0;    // wall clock, comparable across processes; coarse (kernel tick)
  int64_t end_us = 0;      // 0 while running; coarse when done, precise (rf::wall_us) when failed
  std::string cause;       // set when failed
  const char* phase = "";  // the phase label when it started (set_phase_label)
};

// The process-wide phase label every record started from now on carries ("" until the
// first call). Thread-safe; reading it is one atomic load (the collective fast path). The
// texts are kept for the life of the process (a handful of distinct labels), so a record
// holds a plain pointer. With several trainers in one process the label is the last one
// set, whichever set it.
void set_phase_label(std::string_view label);
const char* phase_label();

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity, int rank = -1);
  // Records a start; returns its sequence number for the calls below.
  uint64_t start(const char* collective, uint64_t generation, uint64_t step, uint32_t op, uint64_t bytes);
  void finish(uint64_t seq, int64_t chunk, int peer);
  void fail(uint64_t seq, int64_t chunk, int peer, const std::string& cause);
  // Oldest first; at most `capacity` records.
  std::vector<FlightRecord> snapshot() const;
  // One JSON object per line: {"rank":..,"seq":..,"collective":..,"tag":"g=.. s=.. op=..",...}
  void dump(std::ostream& out) const;
  static std::string to_json(const FlightRecord& r, int rank);

 private:
  FlightRecord* find(uint64_t seq);
  // A spin lock, not std::mutex: taken twice per collective on the small-message path,
  // where a pthread mutex pair cost more; contended only by a rare snapshot()/dump().
  class Lock {
   public:
    void lock();
    void unlock() { held_.store(false, std::memory_order_release); }

   private:
    std::atomic<bool> held_{false};
  };
  mutable Lock mu_;
  std::vector<FlightRecord> ring_;
  uint64_t next_seq_ = 0;
  int rank_;
};

}  // namespace rf::comm
