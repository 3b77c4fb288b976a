// `ringfence run` / `ringfence timeline` and bad input: a PROGRAM that cannot be run and an
// unwritable --summary are refused before anything starts (exit 2, nothing created); a
// worker that exits with an error before it registered with the coordinator in the first
// forming, twice in a row, ends the job with its exit status (one that registered is
// restarted as any crash; test_launcher_exits.cpp has the rest of the start-up rule); a
// worker that exits non-zero after the job is DONE is not restarted and fails the
// launcher; an empty event log says so, and the timeline prints an event without a
// generation or step (listening) without them.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "base/str.h"
#include "tests/elastic/launch.h"
#include "tests/elastic/proc.h"

using namespace rf::test;
using namespace std::chrono_literals;

TEST_CASE("run: a PROGRAM that cannot be run is refused before anything starts, naming it") {
  const std::string dir = temp_dir("prog-bad");
  TempDirGuard cleanup{dir};
  const std::string plain = dir + "/not-executable";
  std::ofstream(plain) << "#!/bin/sh\nexit 0\n";
  REQUIRE(::chmod(plain.c_str(), 0644) == 0);
  struct Case {
    std::string program, why;
  };
  for (const Case& c : {Case{dir + "/nonexistent/prog", "No such file or directory"},
                        Case{plain, "not executable"}, Case{dir, "is a directory"},
                        Case{"rf-no-such-program-anywhere", "not found in PATH"}}) {
    CAPTURE(c.program);
    Launch l("prog-bad-run");
    l.start({"-n", "2"}, {c.program, "--steps", "3"});
    CHECK(l.wait(10s) == 2);
    const std::string out = slurp(l.out);
    INFO("output:\n", out);
    CHECK(out.find("ringfence error run: cannot run '" + c.program + "'") != std::string::npos);
    CHECK(out.find(c.why) != std::string::npos);
    CHECK(occurrences(out, "cannot run") == 1);  // said once, by the launcher, not once per spawn
    CHECK_FALSE(l.log_exists());           // no coordinator was started
  }
}

// Both slots fail the same way: the first slot whose restart fails again ends the job (the
// other may have been restarted once too, or been killed first).
TEST_CASE("run: a worker that fails before it registered, again when restarted, ends the job with its exit status") {
  Launch l("prog-noreg");
  l.start({"-n", "2", "--summary", l.dir + "/summary.json"}, {RF_TEST_WORKER, "--bogus", "1"});
  CHECK(l.wait() == 2);  // the worker's own exit status (a usage error)
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(occurrences(out, "unknown option --bogus") <= 4);  // each slot started twice at most
  CHECK(out.find("(incarnation 1) exited with status 2 before it registered with the coordinator, as incarnation 0 "
                 "did: not restarted, the job ends") != std::string::npos);
  json s = json::parse(slurp(l.summary), nullptr, false);
  REQUIRE(!s.is_discarded());
  CHECK(s["restarts"] >= 1);
  CHECK(s["restarts"] <= 2);
  for (const auto& w : s["workers"]) CHECK(w["spawns"].size() <= 2);
  CHECK(s["exit_status"] == 2);
  CHECK(s["error"].get<std::string>().find("before it registered") != std::string::npos);
}

// One slot cannot start (exit 5 before registering, in every incarnation), the other
// registers and waits for the world to form: the slot is restarted once, then the job ends
// with 5 and the waiting worker is killed, not left behind.
TEST_CASE("run: one slot failing to start ends the job with its status; the other worker is stopped") {
  Launch l("prog-noreg-one");
  const std::string script = rf::str("if [ \"$RINGFENCE_SLOT\" = 1 ]; then echo slot 1 cannot start >&2; exit 5; fi; "
                                      "exec \"$0\" \"$@\"");
  l.start({"-n", "2", "--summary", l.summary}, {"/bin/sh", "-c", script, RF_TEST_WORKER, "--steps", "1000000"});
  CHECK(l.wait() == 5);
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(occurrences(out, "slot 1 cannot start") == 2);
  CHECK(out.find("slot 1 (incarnation 1) exited with status 5 before it registered") != std::string::npos);
  json s = json::parse(slurp(l.summary), nullptr, false);
  REQUIRE(!s.is_discarded());
  CHECK(s["restarts"] == 1);
  REQUIRE(s["workers"][0]["exits"].size() == 1);
  CHECK(s["workers"][0]["exits"][0]["status"] == -9);  // the waiting slot 0, killed by the launcher
}

// The other side of the rule: a worker that did register and then died while generation 1
// was still forming is restarted as before (the recovery path). Slot 2 waits on a gate so
// the world cannot form; slot 1 (incarnation 0) is SIGKILLed once the launcher's status
// line lists two standby workers (slots 0 and 1 registered, as the launcher saw them), then
// its wrapper exits 7 and opens the gate. Every wait in the wrapper is bounded (30 s).
TEST_CASE("run: a worker that registered and died while generation 1 formed is restarted") {
  Launch l("forming-registered");
  const std::string wrapper = R"(dir=$1; shift
wait_for() { i=0; while ! eval "$1"; do i=$((i+1)); [ $i -gt 3000 ] && exit 99; sleep 0.01; done; }
if [ "$RINGFENCE_SLOT" = 2 ]; then wait_for '[ -e "$dir/gate" ]'; exec "$@"; fi
if [ "$RINGFENCE_SLOT" = 1 ] && [ "$RINGFENCE_INCARNATION" = 0 ]; then
  "$@" & pid=$!
  wait_for 'grep -q "standby 2" "$dir/launcher.log"'
  kill -9 $pid; wait $pid
  touch "$dir/gate"
  exit 7
fi
exec "$@")";
  l.start({"-n", "3", "--summary", l.summary},
          {"/bin/sh", "-c", wrapper, "wrap", l.dir, RF_TEST_WORKER, "--steps", "30", "--step-ms", "2"});
  CHECK(l.wait() == 0);
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(out.find("before it registered") == std::string::npos);
  check_restarted_once(l.summary_json(), 1, 7);
}

// A single worker leaves (the job is DONE at once) and its process then exits 3: before,
// it was restarted or ignored, and the launcher said "job DONE (exit 0)" either way.
TEST_CASE("run: a worker exiting non-zero after the job is DONE is not restarted and fails the launcher") {
  Launch l("done-then-fail");
  l.start({"-n", "1", "--summary", l.summary},
          {"/bin/sh", "-c", "\"$0\" \"$@\"; exit 3", RF_TEST_WORKER, "--steps", "20", "--step-ms", "2"});
  CHECK(l.wait() == 1);
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(out.find("slot 0 (incarnation 0) exited with status 3 after the job was DONE") != std::string::npos);
  CHECK(out.find("job DONE (exit 1)") != std::string::npos);
  json s = json::parse(slurp(l.summary), nullptr, false);
  REQUIRE(!s.is_discarded());
  CHECK(s["phase"] == "DONE");
  CHECK(s["restarts"] == 0);
  CHECK(s["workers"][0]["exits"].size() == 1);
  CHECK(s["workers"][0]["spawns"].size() == 1);
}

TEST_CASE("run: an unwritable --summary is refused before anything starts") {
  for (const std::string sub : {"/missing-dir/s.json", ""}) {  // "" = the directory itself
    Launch l("summary-bad");
    const std::string path = l.dir + sub;
    CAPTURE(path);
    l.start({"-n", "1", "--summary", path}, {RF_TEST_WORKER, "--steps", "3"});
    CHECK(l.wait(10s) == 2);
    const std::string out = slurp(l.out);
    INFO("output:\n", out);
    CHECK(out.find("ringfence error run: --summary " + path + ": cannot open for writing") != std::string::npos);
    CHECK_FALSE(l.log_exists());  // no coordinator was started
  }
}

// An existing summary is checked, not truncated: it keeps its contents while the job runs
// and is replaced at the end.
TEST_CASE("run: an existing --summary is left as it is until the job ends") {
  Launch l("summary-existing");
  std::ofstream(l.summary) << "previous run\n";
  l.start({"-n", "1", "--summary", l.summary}, {RF_TEST_WORKER, "--steps", "1000000", "--step-ms", "5"});
  REQUIRE(wait_event(l.log, is_event("running", 1), 20s));
  CHECK(slurp(l.summary) == "previous run\n");
  l.proc.signal(SIGTERM);
  CHECK(l.wait(20s) == 0);
  json s = json::parse(slurp(l.summary), nullptr, false);
  REQUIRE(!s.is_discarded());
  CHECK(s["exit_status"] == 0);
}

TEST_CASE("timeline: an empty event log says there are no events in it") {
  const std::string dir = temp_dir("timeline-empty");
  TempDirGuard cleanup{dir};
  const std::string empty = dir + "/empty.jsonl", junk = dir + "/junk.jsonl";
  std::ofstream(empty).flush();
  std::ofstream(junk) << "not json\n";
  for (const std::string& f : {empty, junk}) {
    CAPTURE(f);
    Proc tl({RF_RINGFENCE, "timeline", f}, {}, dir + "/out.txt");
    CHECK(tl.wait(10s) == 1);
    CHECK(slurp(dir + "/out.txt").find("ringfence error timeline: no events in '" + f + "'") != std::string::npos);
  }
}

TEST_CASE("timeline: an event without a generation or step prints without them") {
  const std::string dir = temp_dir("timeline-fields");
  TempDirGuard cleanup{dir};
  const std::string log = dir + "/events.jsonl";
  std::ofstream(log) << R"({"ts_us":1000000,"event":"listening","host":"127.0.0.1","port":4000,"target_world":2})"
                     << "\n"
                     << R"({"ts_us":1500000,"event":"revoke","cause":"connection_closed","g":1,"s":20,)"
                     << R"("worker":{"slot":1,"incarnation":0}})" << "\n"
                     << R"({"ts_us":2000000,"event":"stop_requested","cause":"launcher","g":2,"s":null})" << "\n";
  Proc tl({RF_RINGFENCE, "timeline", log}, {}, dir + "/out.txt");
  REQUIRE(tl.wait(10s) == 0);
  const std::string text = slurp(dir + "/out.txt");
  CAPTURE(text);
  CHECK(text.find("null") == std::string::npos);
  std::istringstream lines(text);
  std::string listening, revoke, stop;
  REQUIRE(std::getline(lines, listening));
  REQUIRE(std::getline(lines, revoke));
  REQUIRE(std::getline(lines, stop));
  // After the time column: the event, then nothing (listening); g and s columns as given.
  REQUIRE(listening.find("listening") != std::string::npos);
  CHECK(listening.substr(listening.find("listening")) == "listening");
  CHECK(revoke.find("connection_closed    g 1   s 20     slot 1/0") != std::string::npos);
  REQUIRE(stop.find("g 2") != std::string::npos);
  CHECK(stop.substr(stop.find("g 2")) == "g 2");
}
