// The coordinator's replies decoded into typed structs (elastic/replies.h), and the
// names of the states they carry.
#include <doctest/doctest.h>

#include <iterator>
#include <set>
#include <string>

#include "elastic/errors.h"
#include "elastic/replies.h"

using namespace rf::elastic;
using nlohmann::json;

TEST_CASE("decode_reply: a status reply's phase, members, standbys and evictions are typed") {
  const json m = {{"type", "status_reply"}, {"phase", "RUNNING"}, {"generation", 3}, {"step", 41}, {"recoveries", 2},
                  {"members", {{{"rank", 0}, {"slot", 0}, {"incarnation", 1}}, {{"rank", 1}, {"slot", 2}, {"incarnation", 0}}}},
                  {"standby", {{{"slot", 5}, {"incarnation", 0}}}}, {"evicted", json::array()}, {"error", ""},
                  {"loss", 0.5}};
  const StatusReply st = decode_reply_as<StatusReply>(m);
  CHECK(st.phase == Phase::Running);
  CHECK(st.generation == 3);
  CHECK(st.step == 41);
  CHECK(st.recoveries == 2);
  REQUIRE(st.members.size() == 2);
  CHECK(st.members[1] == WorkerId{2, 0});
  REQUIRE(st.standby.size() == 1);
  CHECK(st.standby[0] == WorkerId{5, 0});
  CHECK(st.evicted.empty());
  CHECK(st.error == std::string());
  CHECK(st.raw["loss"] == 0.5);  // what the live line prints stays in raw
  CHECK_FALSE(decode_reply_as<StatusReply>({{"type", "status_reply"}}).error.has_value());
}

TEST_CASE("decode_reply: exited, heartbeat and summary replies") {
  const ExitedReply e = decode_reply_as<ExitedReply>({{"type", "exited_reply"}, {"registered", true}, {"left", false},
                                                      {"phase", "STOPPED"}});
  CHECK(e.registered);
  CHECK_FALSE(e.left);
  CHECK(e.phase == Phase::Stopped);
  const HeartbeatReply h = decode_reply_as<HeartbeatReply>(
      {{"type", "heartbeat_reply"}, {"fenced", false}, {"generation", 4}, {"phase", "RECOVERING"}, {"reconfigure", false},
       {"stop", true}, {"planned", true}, {"cause", "reconfigure"}});
  CHECK(h.generation == 4);
  CHECK(h.phase == Phase::Recovering);
  CHECK(h.stop);
  CHECK(h.planned);
  CHECK(h.cause == Cause::Reconfigure);
  const SummaryReply s = decode_reply_as<SummaryReply>(
      {{"type", "summary_reply"}, {"recoveries", {{{"finished", true}, {"target_step", 9}}}}, {"fired", json::array()}});
  REQUIRE(s.recoveries.size() == 1);
  CHECK(s.recoveries[0].finished);
  CHECK(s.recoveries[0].target_step == 9);
}

TEST_CASE("decode_reply: a bad reply is a ProtocolError naming the reply and the field") {
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "exited_reply"}, {"registered", 1}, {"left", false}}),
                       doctest::Contains("reply 'exited_reply': field 'registered' must be a boolean"), ProtocolError);
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "status_reply"}, {"phase", "WALKING"}}),
                       doctest::Contains("'WALKING' names no phase"), ProtocolError);
  CHECK_THROWS_WITH_AS(decode_reply({{"type", "status_reply"}, {"step", "x"}}), doctest::Contains("field 'step'"),
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

TEST_CASE("event-log words: every TransitionEvent parses back by name, whatever the enumerators' order") {
  std::set<std::string> names;
  for (TransitionEvent e : kTransitionEvents) {
    CHECK(std::string(to_string(e)) != "?");
    CHECK(parse_transition_event(to_string(e)) == e);
    names.insert(to_string(e));
  }
  CHECK(names.size() == std::size(kTransitionEvents));  // none listed twice
  // An enumerator added anywhere in the enum but not to kTransitionEvents: to_string names it
  // (its switch has a case for every enumerator, or the build warns), so it must parse back.
  for (int i = 0; i < 256; ++i) {
    const auto e = static_cast<TransitionEvent>(i);
    if (std::string(to_string(e)) != "?") CHECK_MESSAGE(parse_transition_event(to_string(e)) == e, to_string(e));
  }
  CHECK_FALSE(parse_transition_event("no_such_event").has_value());
  CHECK_FALSE(parse_transition_event("Join").has_value());
}

TEST_CASE("decode_reply: the worker's answers, plan and ready statuses, store replies and welcome") {
  const Answer a = decode_reply_as<Answer>({{"type", "report_reply"}, {"result", "stale"}, {"generation", 5}, {"reason", "r"}});
  CHECK(a.kind == Answer::Stale);
  CHECK(a.generation == 5);
  CHECK(a.reason == "r");
  CHECK(decode_reply_as<Answer>({{"type", "leave_reply"}, {"result", "what"}, {"generation", 1}}).kind == Answer::Stopped);
  CHECK(decode_reply_as<PlanQuery>({{"type", "plan_reply"}, {"status", "timeout"}, {"generation", 2}}).kind ==
        PlanQuery::Pending);
  const PlanQuery revoked =
      decode_reply_as<PlanQuery>({{"type", "plan_reply"}, {"status", "stopped"}, {"generation", 2}, {"error", "e"}});
  CHECK(revoked.kind == PlanQuery::Stopped);
  CHECK(revoked.error == "e");
  CHECK_THROWS_AS(decode_reply_as<PlanQuery>({{"type", "plan_reply"}, {"status", "plan"}, {"generation", 2}}),
                  ProtocolError);  // a plan status without its plan
  CHECK(decode_reply_as<ReadyQuery>({{"type", "ready_reply"}, {"status", "running"}, {"generation", 3}}).kind ==
        ReadyQuery::Running);
  CHECK(decode_reply_as<ReadyQuery>({{"type", "ready_reply"}, {"status", "stale"}, {"generation", 3}}).kind ==
        ReadyQuery::Revoked);  // the round it named is gone
  CHECK(decode_reply_as<ReadyQuery>({{"type", "ready_reply"}, {"status", "refused"}, {"generation", 3}}).kind ==
        ReadyQuery::Pending);
  CHECK(decode_reply_as<KvValueReply>({{"type", "kv_get_reply"}, {"found", true}, {"value", "6869"}}).value_hex == "6869");
  CHECK_FALSE(decode_reply_as<KvValueReply>({{"type", "kv_wait_reply"}, {"found", false}, {"value", nullptr}}).value_hex);
  CHECK(decode_reply_as<KvCasReply>({{"type", "kv_cas_reply"}, {"swapped", true}, {"value", nullptr}}).swapped);
  const WelcomeReply w = decode_reply_as<WelcomeReply>({{"type", "welcome"}, {"generation", 1}, {"phase", "FORMING"},
                                                        {"target_world", 4}, {"heartbeat_ms", 100}, {"lease_ms", 1000}});
  CHECK(w.phase == Phase::Forming);
  CHECK(w.target_world == 4);
  CHECK(w.lease_ms == 1000);
  CHECK_FALSE(decode_reply_as<WelcomeReply>({{"type", "welcome"}, {"generation", 1}, {"phase", "RUNNING"},
                                             {"target_world", 4}}).heartbeat_ms);
}
