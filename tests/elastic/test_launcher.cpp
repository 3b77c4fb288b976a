// `ringfence run` and `ringfence coord` end to end with elastic_test_worker: restart after
// SIGKILL, SIGKILL + restart of a worker evicted as hung (SIGSTOP), refusal of a malformed
// --inject before anything starts, graceful stop on SIGTERM, a digest mismatch failing the
// job with the workers named, and two "nodes" joining one standalone coordinator; with
// --spares, a dead slot's restart held until the recovery the spare served completed; an
// --inject spec that never fired is said at the end and listed in the summary.
#include <doctest/doctest.h>

#include <fstream>

#include "base/str.h"
#include "tests/elastic/launch.h"
#include "tests/elastic/proc.h"

using namespace rf::test;
using namespace std::chrono_literals;

namespace {

// A Launch of the test worker, always with --summary.
struct Run : Launch {
  using Launch::Launch;
  void start(std::vector<std::string> flags, const std::vector<std::string>& worker_args) {
    flags.insert(flags.end(), {"--summary", summary});
    std::vector<std::string> program = {RF_TEST_WORKER};
    program.insert(program.end(), worker_args.begin(), worker_args.end());
    Launch::start(flags, program);
  }
  int wait(rf::Duration d = 60s) { return Launch::wait(d); }
  json summary_json() {
    auto j = json::parse(slurp(summary), nullptr, false);
    REQUIRE_MESSAGE(!j.is_discarded(), "no summary; output:\n", slurp(out));
    return j;
  }
};

}  // namespace

// The one test of the launcher's own at= execution (every other fault here is a step=
// fault the worker fires itself, which is deterministic). at= counts from generation 1
// RUNNING, and the workers cannot finish 150 steps of at least 10 ms each in under 1.5 s,
// so the kill at 0.7 s always lands in training, however slow the machine is.
TEST_CASE("run: a worker SIGKILLed by --inject at= is restarted, W is kept, the job succeeds") {
  Run r("run-kill");
  r.start({"-n", "3", "--join-window", "2s", "--inject", "kill:rank=1:at=0.7"}, {"--steps", "150", "--step-ms", "10"});
  const int code = r.wait();
  CHECK_MESSAGE(code == 0, slurp(r.out));
  json s = r.summary_json();
  CHECK(s["exit_status"] == 0);
  CHECK(s["phase"] == "DONE");
  CHECK(s["restarts"] == 1);
  CHECK(s["generations"].get<int>() >= 2);
  REQUIRE(s["injected"].size() == 1);
  CHECK(s["not_fired"].empty());  // it fired: nothing to warn about
  REQUIRE(s["recoveries"].size() >= 1);
  json rec = s["recoveries"][0];
  CHECK(rec["worker"]["slot"] == 1);
  CHECK(rec["world"] == 3);  // the replacement came back within the join window
  CHECK(rec["detect_ms"].is_number());
  CHECK(rec["total_ms"].is_number());
  CHECK(rec["phases"]["agree"].is_number());
  CHECK(rec["phases"]["transfer"].is_number());  // reported by the workers
  // D1 through the launcher, from the coordinator's record: the kill's connection close
  // is what revoked generation 1 (not the lease, one lease later), within 100 ms of being
  // visible, and nothing was seen before the launcher sent the SIGKILL.
  auto revoke = wait_event(r.log, is_event("revoke", 2), 1s);
  REQUIRE(revoke);
  const double ms = (*revoke)["since_failure_ms"].get<double>();
  MESSAGE("failure seen -> revoke: ", ms, " ms; recovery total ", rec["total_ms"], " ms");
  CHECK((*revoke)["cause"] == "connection_closed");
  CHECK((*revoke)["worker"]["slot"] == 1);
  CHECK((*revoke)["first_seen_us"].get<int64_t>() >= s["injected"][0]["wall_us"].get<int64_t>());
  CHECK(ms < 100.0);
  CHECK(slurp(r.out).find("ringfence: job DONE (exit 0)") != std::string::npos);
  // The same log as a timeline.
  Proc tl({RF_RINGFENCE, "timeline", r.log}, {}, r.dir + "/timeline.txt");
  REQUIRE(tl.wait(10s) == 0);
  const std::string text = slurp(r.dir + "/timeline.txt");
  CHECK(text.find("revoke") != std::string::npos);
  CHECK(text.find("connection_closed") != std::string::npos);
}

TEST_CASE("run: a worker SIGSTOPped is evicted as hung, SIGKILLed and replaced") {
  Run r("run-stop");
  r.start({"-n", "3", "--inject", "stop:rank=2:step=70"}, {"--steps", "200", "--step-ms", "10"});
  const int code = r.wait();
  CHECK_MESSAGE(code == 0, slurp(r.out));
  json s = r.summary_json();
  REQUIRE(s["recoveries"].size() >= 1);
  CHECK(s["recoveries"][0]["cause"] == "lease_expired");
  CHECK(s["restarts"] == 1);
  CHECK(s["not_fired"].empty());  // the step= spec's step was reached (it fired: the eviction)
  json slot2 = s["workers"][2];
  REQUIRE(slot2["exits"].size() == 2);
  CHECK(slot2["exits"][0]["status"] == -9);  // SIGKILLed by the launcher after the eviction
  CHECK(slot2["exits"][1]["status"] == 0);
  CHECK(slurp(r.out).find("evicted as hung: SIGKILL") != std::string::npos);
}

// A fault asked for that never came: the job succeeds (exit 0: the training did), but the
// end of the output and the summary say which specs never fired and why. The test worker's
// last step is 29 (--steps 30), so step=500 cannot be reached; at=60 s cannot come in a
// job of 30 steps of 5 ms.
TEST_CASE("run: an --inject that never fired is reported at the end and in the summary") {
  Run r("run-not-fired");
  r.start({"-n", "2", "--inject", "kill:rank=1:step=500", "--inject", "stop:rank=0:at=60"},
          {"--steps", "30", "--step-ms", "5"});
  const int code = r.wait();
  const std::string out = slurp(r.out);
  CAPTURE(out);
  CHECK(code == 0);
  json s = r.summary_json();
  CHECK(s["exit_status"] == 0);
  CHECK(s["injected"].empty());
  CHECK(s["last_step"] == 29);  // exact: every member's leave carried the step it ended at
  REQUIRE(s["not_fired"].size() == 2);
  CHECK(s["not_fired"][0]["spec"] == "kill:rank=1:step=500");
  CHECK(s["not_fired"][0]["certain"] == true);  // the job ended DONE at a known step
  const std::string step_reason = s["not_fired"][0]["reason"];
  CHECK(step_reason == "the job ended at step 29");
  CHECK(s["not_fired"][1]["spec"] == "stop:rank=0:at=60");
  CHECK(s["not_fired"][1]["certain"] == true);  // the launcher's own
  const std::string at_reason = s["not_fired"][1]["reason"];
  CHECK(at_reason.rfind("the job ended ", 0) == 0);
  CHECK(at_reason.find(" s after it first ran (at=60)") != std::string::npos);
  CHECK(out.find("ringfence: --inject kill:rank=1:step=500 never fired: " + step_reason + "\n") !=
        std::string::npos);
  CHECK(out.find("ringfence: --inject stop:rank=0:at=60 never fired: " + at_reason + "\n") != std::string::npos);
  CHECK(out.find("ringfence: job DONE (exit 0)") != std::string::npos);
}

TEST_CASE("run: a malformed --inject is refused before anything starts") {
  Run r("run-bad");
  r.start({"-n", "2", "--inject", "explode:rank=1:at=1"}, {});
  CHECK(r.wait(10s) == 2);
  const std::string out = slurp(r.out);
  CHECK(out.find("unknown kind 'explode'") != std::string::npos);
  CHECK_FALSE(std::ifstream(r.log).good());  // no coordinator was started
  Run r2("run-bad2");
  r2.start({"-n", "2", "--inject", "kill:rank=5:step=3"}, {});
  CHECK(r2.wait(10s) == 2);
  CHECK(slurp(r2.out).find("not below the world size") != std::string::npos);
}

TEST_CASE("run: SIGTERM is a graceful stop (stop flag, workers leave, exit 0)") {
  Run r("run-term");
  r.start({"-n", "2"}, {"--steps", "1000000", "--step-ms", "5"});
  REQUIRE(wait_event(r.log, is_event("running", 1), 20s));
  r.proc.signal(SIGTERM);
  const int code = r.wait(20s);
  CHECK_MESSAGE(code == 0, slurp(r.out));
  CHECK(wait_event(r.log, is_event("stop_requested"), 1s));
  CHECK(wait_event(r.log, is_event("done", -1, "stop"), 1s));
}

TEST_CASE("run: diverged replicas stop the job with an error naming workers and digests") {
  Run r("run-digest");
  r.start({"-n", "3"}, {"--steps", "100", "--init-state", "--bad-digest-slot", "2"});
  CHECK(r.wait() == 1);
  json s = r.summary_json();
  CHECK(s["phase"] == "STOPPED");
  const std::string e = s["error"];
  CHECK(e.find("digest mismatch") != std::string::npos);
  CHECK(e.find("slot 2 incarnation 0 digest 'x3:bad") != std::string::npos);
  CHECK(e.find("slot 0 incarnation 0") != std::string::npos);
}

TEST_CASE("coord + two launchers (--coord --nnodes 2 --node-rank I) form one job") {
  const std::string dir = temp_dir("multinode");
  TempDirGuard cleanup{dir};
  const std::string token_file = dir + "/token", coord_out = dir + "/coord.log";
  Proc coord({RF_RINGFENCE, "coord", "-n", "2", "--port", "0", "--token-file", token_file, "--heartbeat", "50ms",
              "--lease", "500ms", "--event-log", dir + "/events.jsonl"},
             {}, coord_out);
  // The port is printed once the coordinator listens; wait for that line.
  int port = 0;
  const auto deadline = rf::Clock::now() + capped(10s);
  while (port == 0 && rf::Clock::now() < deadline) {
    const std::string text = slurp(coord_out);
    auto pos = text.find("listening on 127.0.0.1:");
    if (pos != std::string::npos && text.find(" (world", pos) != std::string::npos)
      port = std::atoi(text.c_str() + pos + 23);
    else
      ::poll(nullptr, 0, 5);
  }
  REQUIRE(port > 0);
  std::vector<Proc> nodes;
  for (int i = 0; i < 2; ++i)
    nodes.emplace_back(std::vector<std::string>{RF_RINGFENCE, "run", "-n", "1", "--coord",
                                                "127.0.0.1:" + std::to_string(port), "--token-file", token_file,
                                                "--nnodes", "2", "--node-rank", std::to_string(i), "--", RF_TEST_WORKER,
                                                "--steps", "50", "--step-ms", "5"},
                       std::map<std::string, std::string>{}, rf::str(dir, "/node", i, ".log"));
  for (int i = 0; i < 2; ++i) {
    auto st = nodes[i].wait(30s);
    REQUIRE(st.has_value());
    CHECK_MESSAGE(*st == 0, slurp(rf::str(dir, "/node", i, ".log")));
  }
  auto cst = coord.wait(10s);
  REQUIRE(cst.has_value());
  CHECK(*cst == 0);
  CHECK(slurp(rf::str(dir, "/node1.log")).find("world 2") != std::string::npos);
}

TEST_CASE("run: with --spares a standby worker fills the hole when the slot cannot restart") {
  Run r("run-spare");
  r.start({"-n", "2", "--spares", "1", "--max-restarts", "0", "--inject", "kill:rank=0:step=30"},
          {"--steps", "150", "--step-ms", "10"});
  const int code = r.wait();
  CHECK_MESSAGE(code == 0, slurp(r.out));
  json s = r.summary_json();
  CHECK(s["restarts"] == 0);
  REQUIRE(s["recoveries"].size() >= 1);
  CHECK(s["recoveries"][0]["world"] == 2);  // W kept by the spare, not by a restart
  CHECK(s["workers"][2]["spare"] == true);
  auto running = wait_event(r.log, is_event("running", 2), 1s);
  REQUIRE(running);
  CHECK((*running)["detail"] == "world 2");
}

// Issue 6: with a spare standing by, the dead slot's restart (the next spare) is held until
// the recovery the spare served has completed, so its start-up does not run on the cores
// while the survivors transfer state. Ordering from the coordinator's own log: the join of
// slot 1's new incarnation comes after generation 2 is RUNNING, and the launcher started it
// only once a step past the recovery's target had been heartbeated.
TEST_CASE("run: with --spares the dead slot restarts only after the recovery the spare served completed") {
  Run r("run-spare-held");
  r.start({"-n", "2", "--spares", "1", "--inject", "kill:rank=1:step=30"}, {"--steps", "150", "--step-ms", "10"});
  const int code = r.wait();
  CHECK_MESSAGE(code == 0, slurp(r.out));
  json s = r.summary_json();
  REQUIRE(s["recoveries"].size() >= 1);
  json rec = s["recoveries"][0];
  CHECK(rec["worker"]["slot"] == 1);
  CHECK(rec["world"] == 2);
  CHECK(s["restarts"] == 1);
  json slot1 = s["workers"][1];
  REQUIRE(slot1["spawns"].size() == 2);
  json again = slot1["spawns"][1];
  CHECK(again["incarnation"] == 1);
  INFO("launcher output:\n", slurp(r.out));
  CHECK(again["reason"].get<std::string>().find("completed (T ") != std::string::npos);
  // The restart began after the recovery finished (RUNNING again) ...
  const double running_us = rec["first_seen_us"].get<double>() + rec["total_ms"].get<double>() * 1000.0;
  CHECK(again["wall_us"].get<double>() >= running_us);
  // ... and in the coordinator's order of events: generation 2 RUNNING with the spare
  // (slot 2) before slot 1's new incarnation joined.
  const auto events = read_events(r.log);
  std::optional<size_t> running, rejoin;
  for (size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!running && is_event("running", 2)(e)) running = i;
    if (!rejoin && e.value("event", "") == "join" && e["worker"].is_object() && e["worker"]["slot"] == 1 &&
        e["worker"]["incarnation"] == 1)
      rejoin = i;
  }
  REQUIRE(running);
  REQUIRE(rejoin);
  CHECK(*rejoin > *running);
  CHECK(slurp(r.out).find("a spare takes its place") != std::string::npos);
  CHECK(slurp(r.out).find("slot 1 restarted (incarnation 1) as the next spare") != std::string::npos);
  // The spare filled the hole in generation 2 (worker's own line).
  CHECK(slurp(r.out).find("slot 2 inc 0: generation 2") != std::string::npos);
}

TEST_CASE("run: below --min-world after the deadline the job stops with a clear error") {
  Run r("run-minworld");
  r.start({"-n", "3", "--min-world", "3", "--max-restarts", "0", "--join-window", "300ms", "--min-world-timeout",
           "700ms", "--inject", "kill:rank=1:step=20"},
          {"--steps", "100000", "--step-ms", "5"});
  CHECK(r.wait() == 1);
  json s = r.summary_json();
  CHECK(s["phase"] == "STOPPED");
  CHECK(s["error"].get<std::string>().find("fewer than the minimum world size 3") != std::string::npos);
}
