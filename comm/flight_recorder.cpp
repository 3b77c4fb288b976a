#include "comm/flight_recorder.h"

#include <time.h>

#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/enforce.h"
#include "base/str.h"

namespace rf::comm {

namespace {

// Start and finish of a collective are stamped with the coarse wall clock: a few ns instead
// of ~20 (a precise read was ~10 % of a small blocking all-reduce's own cost), at the
// kernel tick's resolution (1-4 ms) — enough to find the collective that waited a second.
// Failures are stamped precisely (rf::wall_us): those are the times a post-mortem and the
// abort test compare. So a failed record's elapsed_us may be overstated by up to a tick.
int64_t coarse_wall_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// The label texts, interned: set_phase_label is called a few times per recovery, and a
// record started meanwhile may still point at the previous text, so none is ever freed.
std::mutex g_labels_mu;
std::set<std::string, std::less<>>& labels() {
  static auto* s = new std::set<std::string, std::less<>>{std::string()};
  return *s;
}
std::atomic<const char*> g_phase_label{""};

}  // namespace

void set_phase_label(std::string_view label) {
  std::lock_guard lk(g_labels_mu);
  auto it = labels().find(label);
  if (it == labels().end()) it = labels().emplace(label).first;
  g_phase_label.store(it->c_str(), std::memory_order_release);
}

const char* phase_label() { return g_phase_label.load(std::memory_order_acquire); }

void FlightRecorder::Lock::lock() {
  // Uncontended on the collective path (one driving thread); snapshot()/dump() from
  // another thread are rare and short, so yielding while it is held is enough.
  while (held_.exchange(true, std::memory_order_acquire)) {
    while (held_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
}

FlightRecorder::FlightRecorder(size_t capacity, int rank) : ring_(capacity), rank_(rank) {
  RF_ENFORCE(capacity > 0, "flight recorder needs room for one record");
}

uint64_t FlightRecorder::start(const char* collective, uint64_t generation, uint64_t step, uint32_t op,
                               uint64_t bytes) {
  std::lock_guard lk(mu_);
  const uint64_t seq = next_seq_++;
  FlightRecord& r = ring_[seq % ring_.size()];
  // Field by field: no temporary record (and string) per collective on the fast path.
  r.seq = seq;
  r.chunk = -1;
  r.peer = -1;
  r.state = FlightRecord::State::started;
  r.end_us = 0;
  r.cause.clear();
  r.collective = collective;
  r.generation = generation;
  r.step = step;
  r.op = op;
  r.bytes = bytes;
  r.phase = phase_label();
  r.start_us = coarse_wall_us();
  return seq;
}

FlightRecord* FlightRecorder::find(uint64_t seq) {
  FlightRecord& r = ring_[seq % ring_.size()];
  // An old record may have been overwritten by newer ones: then there is nothing to update.
  return (r.seq == seq && seq < next_seq_) ? &r : nullptr;
}

void FlightRecorder::finish(uint64_t seq, int64_t chunk, int peer) {
  std::lock_guard lk(mu_);
  if (FlightRecord* r = find(seq)) {
    r->state = FlightRecord::State::done;
    r->chunk = chunk;
    r->peer = peer;
    r->end_us = coarse_wall_us();
  }
}

void FlightRecorder::fail(uint64_t seq, int64_t chunk, int peer, const std::string& cause) {
  std::lock_guard lk(mu_);
  if (FlightRecord* r = find(seq)) {
    r->state = FlightRecord::State::failed;
    r->chunk = chunk;
    r->peer = peer;
    r->end_us = rf::wall_us();
    r->cause = cause;
  }
}

std::vector<FlightRecord> FlightRecorder::snapshot() const {
  std::lock_guard lk(mu_);
  std::vector<FlightRecord> out;
  const uint64_t n = std::min<uint64_t>(next_seq_, ring_.size());
  for (uint64_t s = next_seq_ - n; s < next_seq_; ++s) out.push_back(ring_[s % ring_.size()]);
  return out;
}

std::string FlightRecorder::to_json(const FlightRecord& r, int rank) {
  static const char* kStates[] = {"started", "done", "failed"};
  nlohmann::json j;
  j["rank"] = rank;
  j["seq"] = r.seq;
  j["collective"] = r.collective;
  j["tag"] = rf::str("g=", r.generation, " s=", r.step, " op=", r.op);
  j["generation"] = r.generation;
  j["step"] = r.step;
  j["op"] = r.op;
  j["chunk"] = r.chunk;
  j["peer"] = r.peer;
  j["bytes"] = r.bytes;
  j["state"] = kStates[static_cast<int>(r.state)];
  j["start_us"] = r.start_us;
  j["end_us"] = r.end_us;
  // How long it ran (or has been running, at dump time): the "waited 1.0 s" of the issue.
  j["elapsed_us"] = (r.end_us ? r.end_us : rf::wall_us()) - r.start_us;
  if (!r.cause.empty()) j["cause"] = r.cause;
  j["phase"] = r.phase;
  return j.dump();
}

void FlightRecorder::dump(std::ostream& out) const {
  for (const FlightRecord& r : snapshot()) out << to_json(r, rank_) << "\n";
  out.flush();
}

}  // namespace rf::comm
