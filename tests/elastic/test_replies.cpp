// The coordinator's replies: each encoded by the coordinator's own encoder (replies.h,
// coordinator_replies.h) and decoded back into its typed struct, field by field; the
// literal JSON cases test the wire format itself (what an older or newer peer may send).
// And the names of the states they carry.
#include <doctest/doctest.h>

#include <array>
#include <iterator>
#include <set>
#include <string>

#include "elastic/coordinator_replies.h"
#include "elastic/errors.h"
#include "elastic/replies.h"
#include "membership_sim.h"

using namespace rf::elastic;
using nlohmann::json;
using rf::elastic::test::Sim;

TEST_CASE("round trip: a status reply's phase, step, members, standbys and evictions") {
  Sim s(2);
  s.form(2);
  s.beat({{0, 0}, {1, 0}}, 41, 1);
  s.join({5, 0});  // W is reached: a standby
  REQUIRE(s.m.standby().size() == 1);
  const std::map<int, Progress> progress = {{0, {0, 41, 0.5, std::nullopt}}};
  const std::vector<json> evicted = {worker_json({3, 2})};
  const StatusReply st = decode_reply_as<StatusReply>(status_reply(s.m, 2, progress, evicted, "", {}));
  CHECK(st.phase == Phase::Running);
  CHECK(st.generation == 1);
  CHECK(st.step == 41);
  CHECK(st.recoveries == 0);
  CHECK(st.members == std::vector<WorkerId>{{0, 0}, {1, 0}});
  CHECK(st.standby == std::vector<WorkerId>{{5, 0}});
  CHECK(st.evicted == std::vector<WorkerId>{{3, 2}});
  CHECK(st.error == std::string());
  CHECK(st.raw["loss"] == 0.5);  // what the live line prints stays in raw
  // The wire format: an older coordinator's reply without an error says nothing of one.
  CHECK_FALSE(decode_reply_as<StatusReply>({{"type", "status_reply"}}).error.has_value());
}

TEST_CASE("round trip: a summary's recoveries, with the workers' phase timings by their wire words") {
  Sim s(3);
  s.form(3);
  s.lose({1, 0});
  CHECK(s.report({0, 0}, 2, 10, "d10").ok());
  CHECK(s.report({2, 0}, 2, 10, "d10").ok());
  s.join({1, 1});
  CHECK(s.report_new({1, 1}).ok());
  s.ready_all();
  s.m.phase_timing({2, 0}, 2, RecoveryPhase::Transfer, 12.5);
  s.m.phase_timing({1, 1}, 2, RecoveryPhase::Transfer, 20.0);  // the max over workers
  const SummaryReply sum = decode_reply_as<SummaryReply>(summary_reply(s.m, [](rf::TimePoint) { return 0; }, {}));
  REQUIRE(sum.recoveries.size() == 1);
  CHECK(sum.recoveries[0].finished);
  CHECK(sum.recoveries[0].target_step == 10);
  CHECK(sum.fired.empty());
  const json& rec = sum.raw["recoveries"][0];
  CHECK(rec["cause"] == "connection_closed");
  CHECK(rec["phases"]["transfer"] == 20.0);
  CHECK(rec["phases"]["connect"].is_null());  // none reported
  CHECK(rec["phases"].contains("verify"));
}

TEST_CASE("round trip: exited, heartbeat and welcome replies") {
  for (const ExitedReply sent : {ExitedReply{true, false, Phase::Stopped}, ExitedReply{false, true, Phase::Running}}) {
    const ExitedReply e = decode_reply_as<ExitedReply>(encode_reply(sent));
    CHECK(e.registered == sent.registered);
    CHECK(e.left == sent.left);
    CHECK(e.phase == sent.phase);
  }
  for (const std::optional<Cause> cause : {std::optional<Cause>(Cause::Reconfigure), std::optional<Cause>()}) {
    const HeartbeatReply sent{false, 4, Phase::Recovering, true, true, true, cause};
    const HeartbeatReply h = decode_reply_as<HeartbeatReply>(encode_reply(sent));
    CHECK_FALSE(h.fenced);
    CHECK(h.generation == 4);
    CHECK(h.phase == Phase::Recovering);
    CHECK(h.reconfigure);
    CHECK(h.stop);
    CHECK(h.planned);
    CHECK(h.cause == cause);
  }
  HeartbeatReply fenced;
  fenced.fenced = true;
  CHECK(decode_reply_as<HeartbeatReply>(encode_reply(fenced)).fenced);
  // The wire format: the cause is the event log's word, "" when there is none.
  CHECK(encode_reply(fenced)["cause"] == "");
  fenced.cause = Cause::LeaseExpired;
  CHECK(encode_reply(fenced)["cause"] == "lease_expired");
  const WelcomeReply w = decode_reply_as<WelcomeReply>(encode_reply(WelcomeReply{1, Phase::Forming, 4, 100, 1000}));
  CHECK(w.generation == 1);
  CHECK(w.phase == Phase::Forming);
  CHECK(w.target_world == 4);
  CHECK(w.heartbeat_ms == 100);
  CHECK(w.lease_ms == 1000);
  // A launcher's welcome has no lease.
  const WelcomeReply lw =
      decode_reply_as<WelcomeReply>(encode_reply(WelcomeReply{7, Phase::Running, 2, std::nullopt, std::nullopt}));
  CHECK(lw.generation == 7);
  CHECK(lw.phase == Phase::Running);
  CHECK_FALSE(lw.heartbeat_ms);
  CHECK_FALSE(lw.lease_ms);
}

TEST_CASE("decode_reply: a bad reply is a ProtocolError naming the reply and the field") {
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "exited_reply"}, {"registered", 1}, {"left", false}}),
                       doctest::Contains("reply 'exited_reply': field 'registered' must be a boolean"), ProtocolError);
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "status_reply"}, {"phase", "WALKING"}}),
                       doctest::Contains("'WALKING' names no phase"), ProtocolError);
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "status_reply"}, {"step", "x"}}), doctest::Contains("field 'step'"),
                       ProtocolError);
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "heartbeat_reply"}, {"generation", 2}, {"cause", "boredom"}}),
                       doctest::Contains("reply 'heartbeat_reply': field 'cause' = 'boredom' names no cause"),
                       ProtocolError);
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "what_reply"}}), doctest::Contains("unexpected reply type 'what_reply'"),
                       ProtocolError);
  CHECK_THROWS_AS(decode_reply_as<StatusReply>({{"type", "exited_reply"}, {"registered", true}, {"left", true}}),
                  ProtocolError);
}

TEST_CASE("states: each name parses back to its enumerator") {
  for (Phase p : {Phase::Forming, Phase::Running, Phase::Recovering, Phase::Stopped, Phase::Done})
    CHECK(parse_phase(to_string(p)) == p);
  CHECK_FALSE(parse_phase("running").has_value());
  CHECK(std::string(to_string(TransitionEvent::ReconfigureRequested)) == "reconfigure_requested");
  for (Answer::Kind k : {Answer::Accepted, Answer::Stale, Answer::Fenced, Answer::Refused, Answer::Stopped, Answer::Finished})
    CHECK(parse_answer_kind(to_string(k)) == k);
  CHECK(std::string(to_string(PlanQuery::Ready)) == "plan");
  CHECK(std::string(to_string(ReadyQuery::Running)) == "running");
  CHECK(std::string(to_string(PlanQuery::Done)) == "done");
}

namespace {

// Every value of `all` (the enum's table, base/enum_names.h) has a name of its own that
// parses back to it, and so does every other value of the enum that to_string names.
// Neither the enumerators' order nor their values matter.
template <class E, size_t N, class Parse>
void check_names(const std::array<E, N>& all, Parse parse) {
  std::set<std::string> names;
  for (E e : all) {
    CHECK(std::string(to_string(e)) != "?");
    CHECK(parse(to_string(e)) == e);
    names.insert(to_string(e));
  }
  CHECK(names.size() == N);  // none listed twice
  for (int i = 0; i < 256; ++i) {
    const auto e = static_cast<E>(i);
    if (std::string(to_string(e)) != "?") CHECK_MESSAGE(parse(to_string(e)) == e, to_string(e));
  }
  CHECK_FALSE(parse("no_such_name").has_value());
}

}  // namespace

TEST_CASE("event-log words: every TransitionEvent parses back by name, whatever the enumerators' order") {
  check_names(kTransitionEvents, parse_transition_event);
  CHECK_FALSE(parse_transition_event("Join").has_value());
}

TEST_CASE("causes and recovery phases: every one parses back from its wire word") {
  check_names(kCauses, parse_cause);
  CHECK(std::string(to_string(Cause::LeaseExpired)) == "lease_expired");
  CHECK_FALSE(parse_cause("").has_value());
  check_names(kRecoveryPhases, parse_recovery_phase);
  CHECK(std::string(to_string(RecoveryPhase::Connect)) == "connect");
  CHECK(std::string(to_string(RecoveryPhase::Transfer)) == "transfer");
  CHECK(std::string(to_string(RecoveryPhase::Verify)) == "verify");
}

TEST_CASE("round trip: the worker's answers, plan and ready statuses and store replies") {
  for (const char* type : {"report_reply", "failure_reply", "leave_reply", "fatal_reply"})
    for (Answer::Kind k : {Answer::Accepted, Answer::Stale, Answer::Fenced, Answer::Refused, Answer::Stopped,
                           Answer::Finished}) {
      const Answer a = decode_reply_as<Answer>(encode_answer(type, Answer{k, 5, "r"}));
      CHECK(a.kind == k);
      CHECK(a.generation == 5);
      CHECK(a.reason == "r");
    }
  for (PlanQuery::Kind k : {PlanQuery::Pending, PlanQuery::Revoked, PlanQuery::Fenced, PlanQuery::Stopped,
                            PlanQuery::Done}) {
    const PlanQuery q = decode_reply_as<PlanQuery>(encode_reply(PlanQuery{k, 2, {}, "e"}));
    CHECK(q.kind == k);
    CHECK(q.generation == 2);
    CHECK(q.error == "e");
  }
  Plan plan;
  plan.generation = 3;
  plan.target_step = 9;
  plan.target_digest = "d9";
  plan.job_id = "job";
  plan.ranks.push_back({0, {0, 0}, {true, 9, ""}, std::nullopt});
  plan.ranks.push_back({1, {4, 2}, {false, -1, ""}, 0});
  const PlanQuery ready = decode_reply_as<PlanQuery>(encode_reply(PlanQuery{PlanQuery::Ready, 3, plan, ""}));
  REQUIRE(ready.kind == PlanQuery::Ready);
  CHECK(ready.plan.generation == 3);
  CHECK(ready.plan.target_step == 9);
  CHECK(ready.plan.target_digest == "d9");
  CHECK(ready.plan.job_id == "job");
  REQUIRE(ready.plan.ranks.size() == 2);
  CHECK(ready.plan.ranks[1].worker == WorkerId{4, 2});
  CHECK(ready.plan.ranks[1].source_rank == 0);
  for (ReadyQuery::Kind k : {ReadyQuery::Pending, ReadyQuery::Running, ReadyQuery::Revoked, ReadyQuery::Fenced,
                             ReadyQuery::Stopped, ReadyQuery::Done}) {
    const ReadyQuery q = decode_reply_as<ReadyQuery>(encode_reply(ReadyQuery{k, 3, "why"}));
    CHECK(q.kind == k);
    CHECK(q.generation == 3);
    CHECK(q.error == "why");
  }
  // A ready refused at once: a stale round reads as Revoked (the round it named is gone).
  const ReadyQuery refused = decode_reply_as<ReadyQuery>(encode_ready_refusal(Answer{Answer::Stale, 4, "old"}));
  CHECK(refused.kind == ReadyQuery::Revoked);
  CHECK(refused.generation == 4);
  CHECK(refused.error == "old");
  CHECK(decode_reply_as<ReadyQuery>(encode_ready_refusal(Answer{Answer::Fenced, 4, ""})).kind == ReadyQuery::Fenced);
  for (const char* type : {"kv_get_reply", "kv_wait_reply"}) {
    CHECK(decode_reply_as<KvValueReply>(encode_kv_value(type, KvValueReply{"6869"})).value_hex == "6869");
    CHECK_FALSE(decode_reply_as<KvValueReply>(encode_kv_value(type, KvValueReply{})).value_hex);
  }
  const KvCasReply cas = decode_reply_as<KvCasReply>(encode_reply(KvCasReply{false, "6869"}));
  CHECK_FALSE(cas.swapped);
  CHECK(cas.value_hex == "6869");
  CHECK(decode_reply_as<KvCasReply>(encode_reply(KvCasReply{true, std::nullopt})).swapped);
}

TEST_CASE("the wire format: words an older or newer peer may send read as the nearest state") {
  // An answer's result word this worker does not know stops it.
  CHECK(decode_reply_as<Answer>({{"type", "leave_reply"}, {"result", "what"}, {"generation", 1}}).kind == Answer::Stopped);
  CHECK(decode_reply_as<PlanQuery>({{"type", "plan_reply"}, {"status", "timeout"}, {"generation", 2}}).kind ==
        PlanQuery::Pending);
  CHECK_THROWS_AS(decode_reply_as<PlanQuery>({{"type", "plan_reply"}, {"status", "plan"}, {"generation", 2}}),
                  ProtocolError);  // a plan status without its plan
  CHECK(decode_reply_as<ReadyQuery>({{"type", "ready_reply"}, {"status", "refused"}, {"generation", 3}}).kind ==
        ReadyQuery::Pending);
  // A heartbeat reply without a cause, or with an empty one: no revocation named.
  CHECK_FALSE(decode_reply_as<HeartbeatReply>({{"type", "heartbeat_reply"}, {"generation", 1}}).cause);
  CHECK_FALSE(decode_reply_as<HeartbeatReply>({{"type", "heartbeat_reply"}, {"generation", 1}, {"cause", ""}}).cause);
  CHECK(decode_reply_as<HeartbeatReply>({{"type", "heartbeat_reply"}, {"generation", 1}, {"cause", "wedged"}}).cause ==
        Cause::Wedged);
}
