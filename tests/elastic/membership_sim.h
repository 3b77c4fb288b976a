#pragma once
// A Membership driven by a simulated clock, for the state machine's tests: time passes only
// through advance() (which ticks), and every transition is kept in `log`.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "elastic/membership.h"

namespace rf::elastic::test {

using namespace std::chrono_literals;

struct Sim {
  rf::TimePoint now = rf::TimePoint{} + 1000s;
  MembershipOptions opt;
  Membership m;
  std::vector<Transition> log;

  static MembershipOptions make(int w, int min) {
    MembershipOptions o;
    o.target_world = w;
    o.min_world = min;
    o.heartbeat = 100ms;
    o.lease = 1s;
    o.join_window = 2s;
    o.form_timeout = 10s;
    o.min_world_timeout = 5s;
    o.ready_timeout = 20s;
    o.report_timeout = 15s;
    return o;
  }
  explicit Sim(int w, int min = 1) : opt(make(w, min)), m(opt, now) {}
  explicit Sim(MembershipOptions o) : opt(o), m(opt, now) {}

  void drain() {
    for (auto& t : m.take_transitions()) log.push_back(t);
  }
  void advance(rf::Duration d) {
    now += d;
    m.tick(now);
    drain();
  }
  // Heartbeats from the given slots (incarnation as registered) at their steps.
  void beat(const std::vector<WorkerId>& ws, int64_t step, uint64_t g) {
    for (auto w : ws) m.heartbeat(w, g, step, now);
  }
  // One heartbeat that says what the worker's training thread does (elastic/liveness.h).
  void beat_doing(WorkerId w, int64_t step, uint64_t g, Activity::Kind kind, rf::Duration elapsed,
                  rf::Duration bound = 1s) {
    m.heartbeat(w, g, step, now, Activity{kind, elapsed, {}, bound, "step"});
  }
  // Lets time pass in 100 ms steps while the given workers keep heartbeating.
  void run_for(rf::Duration d, const std::vector<WorkerId>& ws, int64_t step) {
    for (rf::Duration t{}; t < d; t += 100ms) {
      beat(ws, step, m.generation());
      advance(100ms);
    }
  }
  void join(WorkerId w) {
    REQUIRE(m.join(w, now).ok());
    drain();
  }
  Answer report(WorkerId w, uint64_t round, int64_t step, const std::string& digest = "d") {
    auto a = m.report(w, round, StateReport{true, step, digest}, now);
    drain();
    return a;
  }
  Answer report_new(WorkerId w, uint64_t round = 0) {
    auto a = m.report(w, round, StateReport{}, now);
    drain();
    return a;
  }
  void ready_all() {
    REQUIRE(m.plan());
    const Plan p = *m.plan();
    for (const auto& r : p.ranks) REQUIRE(m.ready(r.worker, p.generation, now).ok());
    drain();
  }
  // Forms generation 1 with slots 0..n-1, all at step -1 with the same initial digest.
  std::vector<WorkerId> form(int n) {
    std::vector<WorkerId> ws;
    for (int i = 0; i < n; ++i) ws.push_back({i, 0});
    for (auto w : ws) join(w);
    for (auto w : ws) REQUIRE(report(w, 0, -1, "init").ok());
    REQUIRE(m.plan());
    ready_all();
    REQUIRE(m.phase() == Phase::Running);
    return ws;
  }
  // A worker's connection closes (D1: the process died) and the transitions are read.
  void lose(WorkerId w) {
    m.connection_lost(w, now);
    drain();
  }
  // A restarted or new worker joins and reports with no state (docs/protocol.md step 2).
  void join_new(WorkerId w) {
    join(w);
    report_new(w);
  }
  // The common start of a recovery: generation 1 of n workers runs, slot `dead` dies (D1),
  // and every survivor reports for round 2 at `step` with `digest`. Returns the survivors.
  std::vector<WorkerId> fail_one(int n, int dead, int64_t step, const std::string& digest) {
    form(n);
    lose({dead, 0});
    REQUIRE(m.generation() == 2);
    std::vector<WorkerId> survivors;
    for (int i = 0; i < n; ++i)
      if (i != dead) survivors.push_back({i, 0});
    for (auto w : survivors) REQUIRE(report(w, 2, step, digest).ok());
    return survivors;
  }
  // Time passes in 100 ms ticks (`ticks` of them) while the given workers heartbeat.
  void beat_for_ticks(int ticks, const std::vector<WorkerId>& ws, int64_t step, uint64_t g) {
    for (int i = 0; i < ticks; ++i) {
      beat(ws, step, g);
      advance(100ms);
    }
  }
  // Exactly one eviction was logged, for `cause`, and handed to the launcher for `w`
  // (the launcher SIGKILLs what the coordinator evicted).
  void check_evicted_once(const std::string& cause, WorkerId w) {
    CHECK(count("evict", cause) == 1);
    auto ev = m.take_evictions();
    REQUIRE(ev.size() == 1);
    CHECK(ev[0] == w);
  }
  int count(const std::string& event, const std::string& cause = "") const {
    return static_cast<int>(std::count_if(log.begin(), log.end(), [&](const Transition& t) {
      return to_string(t.event) == event && (cause.empty() || t.cause == cause);
    }));
  }
  const Transition& last(const std::string& event) const {
    for (auto it = log.rbegin(); it != log.rend(); ++it)
      if (to_string(it->event) == event) return *it;
    FAIL("no event ", event);
    return log.front();
  }
};

inline std::vector<int> slots_of(const Plan& p) {
  std::vector<int> s;
  for (auto& r : p.ranks) s.push_back(r.worker.slot);
  return s;
}

}  // namespace rf::elastic::test
