// The clients' requests: each encoded by the client's own encoder (encode_request,
// elastic/messages.h), framed, and decoded back by the coordinator's decoder, field by field.
// test_frame.cpp keeps the literal JSON that tests the wire format itself.
#include <doctest/doctest.h>

#include "elastic/frame.h"
#include "elastic/messages.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {
// Through a frame, as on the wire.
template <class T>
T round_trip(const T& sent) {
  const Request r = decode_request(parse_message(encode_frame(encode_request(sent)).substr(4)));
  REQUIRE(std::holds_alternative<T>(r));
  return std::get<T>(r);
}
}  // namespace

TEST_CASE("round trip: a heartbeat, with and without its optional figures, activity and checkpoint failures") {
  Heartbeat h;
  h.generation = 3;
  h.step = 41;
  const Heartbeat bare = round_trip(h);
  CHECK(bare.generation == 3);
  CHECK(bare.step == 41);
  CHECK_FALSE(bare.loss);
  CHECK_FALSE(bare.samples_per_s);
  CHECK_FALSE(bare.ckpt_failed);
  CHECK(bare.activity.kind == Activity::Idle);
  CHECK_FALSE(encode_request(h).contains("activity"));  // the default activity: absent, read as it
  h.loss = 0.5;
  h.samples_per_s = 1200;
  h.ckpt_failed = 2;
  h.ckpt_error = "write failed";
  h.activity = Activity{Activity::Wait, 1500ms, 20ms, 2s, "step 41"};
  const Heartbeat full = round_trip(h);
  CHECK(full.loss == 0.5);
  CHECK(full.samples_per_s == 1200.0);
  CHECK(full.ckpt_failed == 2);
  CHECK(full.ckpt_error == "write failed");
  CHECK(full.activity.kind == Activity::Wait);
  CHECK(full.activity.elapsed == 1500ms);
  CHECK(full.activity.runnable == 20ms);
  CHECK(full.activity.bound == 2s);
  CHECK(full.activity.where == "step 41");
  CHECK(full.activity.frozen == 0ms);
  CHECK_FALSE(encode_request(h)["activity"].contains("frozen_us"));  // none: absent, read as none
  h.activity.frozen = 900ms;
  CHECK(round_trip(h).activity.frozen == 900ms);
}

TEST_CASE("round trip: a report, plan, ready, and the recovery's failure and phase timing") {
  const Report r = round_trip(Report{5, true, 9, "d9", 4});
  CHECK(r.round == 5);
  CHECK(r.has_state);
  CHECK(r.step == 9);
  CHECK(r.digest == "d9");
  CHECK(r.comm_generation == 4u);
  CHECK_FALSE(round_trip(Report{0, false, -1, "", 0}).has_state);
  const PlanRequest p = round_trip(PlanRequest{7, 1500});
  CHECK(p.round == 7);
  CHECK(p.timeout_ms == 1500);
  const Ready rd = round_trip(Ready{8, 60000});
  CHECK(rd.generation == 8);
  CHECK(rd.timeout_ms == 60000);
  for (FailureKind k : {FailureKind::comm, FailureKind::gpu_stuck})
    for (const std::optional<int> peer : {std::optional<int>(1), std::optional<int>()}) {
      const FailureReport f = round_trip(FailureReport{4, 9, peer, "peer reset", k});
      CHECK(f.generation == 4);
      CHECK(f.step == 9);
      CHECK(f.peer_slot == peer);
      CHECK(f.cause == "peer reset");
      CHECK(f.kind == k);
    }
  for (RecoveryPhase ph : kRecoveryPhases) {
    const PhaseTiming t = round_trip(PhaseTiming{6, ph, 12.5});
    CHECK(t.generation == 6);
    CHECK(t.phase == ph);
    CHECK(t.ms == 12.5);
  }
  CHECK(encode_request(PhaseTiming{6, RecoveryPhase::Transfer, 1})["phase"] == "transfer");  // the wire's word
}

TEST_CASE("round trip: the store's requests") {
  const KvSet s = round_trip(KvSet{2, "addr/0", "6869"});
  CHECK(s.generation == 2);
  CHECK(s.key == "addr/0");
  CHECK(s.value == "6869");
  const KvGet g = round_trip(KvGet{2, "addr/1"});
  CHECK(g.generation == 2);
  CHECK(g.key == "addr/1");
  const KvWait w = round_trip(KvWait{3, "addr/2", 500});
  CHECK(w.generation == 3);
  CHECK(w.key == "addr/2");
  CHECK(w.timeout_ms == 500);
  for (const std::optional<std::string>& expected : {std::optional<std::string>("aa"), std::optional<std::string>()}) {
    const KvCas c = round_trip(KvCas{4, "k", expected, "bb"});
    CHECK(c.generation == 4);
    CHECK(c.key == "k");
    CHECK(c.expected == expected);
    CHECK(c.desired == "bb");
  }
}

TEST_CASE("round trip: leave, fatal, injected and the launcher's requests") {
  const Leave l = round_trip(Leave{39, 1, "fsync failed"});
  CHECK(l.step == 39);
  CHECK(l.ckpt_failed == 1);
  CHECK(l.ckpt_error == "fsync failed");
  const Leave quiet = round_trip(Leave{39, std::nullopt, ""});
  CHECK(quiet.step == 39);
  CHECK_FALSE(quiet.ckpt_failed);
  CHECK(round_trip(Fatal{"another run's checkpoints"}).error == "another run's checkpoints");
  const Injected i = round_trip(Injected{2, 3, "hang:rank=1:step=3"});
  CHECK(i.generation == 2);
  CHECK(i.step == 3);
  CHECK(i.spec == "hang:rank=1:step=3");
  const Exited e = round_trip(Exited{2, 5, -9, 1'700'000'000'000'000});
  CHECK(e.slot == 2);
  CHECK(e.incarnation == 5);
  CHECK(e.status == -9);
  CHECK(e.exited_wall_us == 1'700'000'000'000'000);
  round_trip(Status{});
  round_trip(StopJob{});
  round_trip(Summary{});
}
