// `ringfence run` judges a worker's non-zero exit by what the coordinator knew of it (its
// exited_reply), not by what the launcher's status polls happened to see:
// - a worker that registered and exited at once, while generation 1 formed, is restarted
//   (the launcher's polls could miss it and ended the job "before it registered");
// - a worker that had left the job (finished its steps) and then exits non-zero is not
//   restarted, and the launcher exits 1 naming it;
// - a worker's fatal configuration error (Client::fatal) STOPs the job with that error:
//   said once by the launcher, nothing restarted;
// - before the job first ran, a worker that never registered: killed by a signal, it is
//   restarted like any crash; exiting with an error status, it is restarted once, and the
//   job ends with that status when the next incarnation of the slot does the same (or the
//   slot has no restarts left); RINGFENCE_JOB_RAN tells each worker whether the job had
//   run when it started (a restart after a start-up error must check what the start did);
// - a worker failing with the same error (its RINGFENCE_ERROR_FILE) after each of two
//   restarts is not restarted again: the job stops at once naming it, or goes on without
//   the slot where --min-world allows.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "base/str.h"
#include "tests/elastic/launch.h"
#include "tests/elastic/proc.h"

using namespace rf::test;
using namespace std::chrono_literals;

// Slot 1 (incarnation 0) joins and exits 7 at once, faster than any status poll: the
// coordinator knows it registered, so it is restarted and the job ends DONE. Repeated, as
// the old poll-based judgement missed it most of the time, not always.
TEST_CASE("run: a worker that registered and exited at once while generation 1 formed is restarted") {
  for (int i = 0; i < 5; ++i) {
    CAPTURE(i);
    Launch l("join-exit");
    l.start({"-n", "2", "--summary", l.summary}, {RF_EXIT_WORKER, "join-exit", "1", "7", RF_TEST_WORKER, "--steps", "5", "--step-ms", "1"});
    const int st = l.wait();
    const std::string out = slurp(l.out);
    INFO("output:\n", out);
    CHECK(st == 0);
    CHECK(out.find("before it registered") == std::string::npos);
    check_restarted_once(l.summary_json(), 1, 7);
    if (st != 0) break;
  }
}

// Slot 0 finishes its 5 steps, leaves, and its process then exits 3 while slot 1 still
// trains (1e6 steps): the job is not DONE, but slot 0 has left it, so it is not restarted.
// The test then stops the job (SIGINT: slot 1 leaves) and the launcher exits 1 naming slot 0.
TEST_CASE("run: a worker exiting non-zero after it left the job is not restarted and fails the launcher") {
  Launch l("left-then-fail");
  const std::string wrapper = R"(if [ "$RINGFENCE_SLOT" = 0 ]; then "$@" --steps 5; exit 3; fi; exec "$@" --steps 1000000)";
  l.start({"-n", "2", "--summary", l.summary}, {"/bin/sh", "-c", wrapper, "wrap", RF_TEST_WORKER, "--step-ms", "2"});
  const bool seen = l.wait_output("slot 0 (incarnation 0) exited with status 3 after it left the job", 20s);
  l.proc.signal(SIGINT);
  const int st = l.wait();
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(seen);
  CHECK(st == 1);
  json s = l.summary_json();
  REQUIRE(!s.is_discarded());
  CHECK(s["restarts"] == 0);
  CHECK(s["workers"][0]["spawns"].size() == 1);
  REQUIRE(s["workers"][0]["exits"].size() == 1);
  CHECK(s["workers"][0]["exits"][0]["status"] == 3);
  CHECK(s["error"].get<std::string>().find("slot 0 (incarnation 0) exited with status 3 after it left the job") !=
        std::string::npos);
}

// Every worker registers and reports the same fatal error: the coordinator STOPs the job
// with it, the launcher says it once at the end, exits 1, and restarts nobody.
TEST_CASE("run: a worker's fatal error stops the job with that error, without restarts") {
  Launch l("fatal");
  const std::string text = "the configuration cannot work (test)";
  l.start({"-n", "2", "--quiet", "--summary", l.summary}, {RF_EXIT_WORKER, "fatal", text});
  const int st = l.wait();
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(st == 1);
  CHECK(occurrences(out, "ringfence: error: slot 0 (incarnation 0) cannot run: " + text) +
            occurrences(out, "ringfence: error: slot 1 (incarnation 0) cannot run: " + text) ==
        1);  // the launcher says it once (a worker that joins after the stop is refused with it)
  CHECK(out.find("cannot run: " + text) != std::string::npos);
  CHECK(out.find("before it registered") == std::string::npos);
  json s = l.summary_json();
  REQUIRE(!s.is_discarded());
  CHECK(s["phase"] == "STOPPED");
  CHECK(s["restarts"] == 0);
  CHECK(s["error"].get<std::string>().find("cannot run: " + text) != std::string::npos);
  for (const auto& w : s["workers"]) CHECK(w["spawns"].size() == 1);
}

// A worker's first incarnation dies before it contacts the coordinator, then the slot runs
// normally: SIGKILLed (by itself, standing in for the OOM killer), a crash like any other;
// exiting 4, a start-up error that did not come back. Either way it is restarted within
// --max-restarts and the job ends DONE.
TEST_CASE("run: a worker killed by a signal, or exiting with an error once, before it registered is restarted") {
  struct Case {
    std::string slot, how, n, note;
    int status;
  };
  for (const Case& c :
       {Case{"1", "signal", "9", "slot 1 (incarnation 0) was killed by signal 9 before it registered with the "
                                 "coordinator: restarted", -9},
        Case{"0", "exit", "4", "slot 0 (incarnation 0) exited with status 4 before it registered with the "
                               "coordinator: restarted once", 4}}) {
    CAPTURE(c.how);
    Launch l("die-before-join");
    l.start({"-n", "2", "--summary", l.summary},
            {RF_EXIT_WORKER, "die-before-join", c.slot, c.how, c.n, RF_TEST_WORKER, "--steps", "5", "--step-ms", "1"});
    const int st = l.wait();
    const std::string out = slurp(l.out);
    INFO("output:\n", out);
    CHECK(st == 0);
    CHECK(out.find(c.note) != std::string::npos);
    CHECK(out.find("the job ends") == std::string::npos);
    check_restarted_once(l.summary_json(), std::stoi(c.slot), c.status);
  }
}

// RINGFENCE_JOB_RAN tells a worker whether the job had run when it started: a restart
// into a running job may skip start-up checks (train_mlp's test set), a restart after a
// start-up error must not, or it would not fail again and the job would not end with that
// error. Slot 1 dies by a signal before registering (its restart: 0); once the launcher has
// printed generation 1 RUNNING the test SIGKILLs that restart (the next one: 1). The
// wrapper records each worker's environment and pid (exec keeps it).
TEST_CASE("run: RINGFENCE_JOB_RAN is 0 for a worker started before the job first ran, 1 after") {
  Launch l("job-ran");
  const std::string wrapper = R"(d=$1; shift
echo "$RINGFENCE_SLOT $RINGFENCE_INCARNATION ${RINGFENCE_JOB_RAN-unset}" >> "$d/env"
echo $$ > "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION.tmp"
mv "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION.tmp" "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION"
exec "$@")";
  l.start({"-n", "2", "--summary", l.summary},
          {"/bin/sh", "-c", wrapper, "wrap", l.dir, RF_EXIT_WORKER, "die-before-join", "1", "signal", "9", RF_TEST_WORKER,
           "--steps", "1000000", "--step-ms", "5"});
  const std::string env = l.dir + "/env";
  REQUIRE_MESSAGE(l.wait_output("ringfence: g 1 RUNNING", 30s), "generation 1 never ran:\n", slurp(l.out));
  const pid_t restart = std::stoi(slurp(l.dir + "/pid-1-1"));
  ::kill(restart, SIGKILL);
  const bool restarted = wait_text(env, "1 2 ", 30s);
  l.proc.signal(SIGTERM);
  l.wait();
  INFO("output:\n", slurp(l.out), "\nenv:\n", slurp(env));
  REQUIRE(restarted);
  std::vector<std::string> lines;
  std::istringstream in(slurp(env));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  CHECK(lines == std::vector<std::string>{"0 0 0", "1 0 0", "1 1 0", "1 2 1"});
}

// A bad flag fails every incarnation the same way: the first exit is restarted, the
// second ends the job with the worker's status and the launcher's own error, at once (not
// after --min-world-timeout, 30 s, which a slot that is simply not restarted would wait).
TEST_CASE("run: a worker that exits with an error before it registered twice in a row ends the job") {
  Launch l("exit-twice-before-join");
  l.start({"-n", "1", "--summary", l.summary}, {RF_TEST_WORKER, "--bogus", "1"});
  const int st = l.wait();
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(st == 2);
  CHECK(occurrences(out, "unknown option --bogus") == 2);
  CHECK(out.find("slot 0 (incarnation 0) exited with status 2 before it registered with the coordinator: "
                 "restarted once") != std::string::npos);
  json s = l.summary_json();
  REQUIRE(!s.is_discarded());
  CHECK(s["exit_status"] == 2);
  CHECK(s["restarts"] == 1);
  REQUIRE(s["workers"][0]["exits"].size() == 2);
  CHECK(s["workers"][0]["exits"][0]["status"] == 2);
  CHECK(s["workers"][0]["exits"][1]["status"] == 2);
  CHECK(s["error"].get<std::string>().find("slot 0 (incarnation 1) exited with status 2 before it registered with "
                                           "the coordinator, as incarnation 0 did: not restarted, the job ends") !=
        std::string::npos);
  CHECK(s["wall_s"].get<double>() < 10.0);
}

// With --max-restarts 0 the first such exit ends the job: nothing else would restart it,
// and the job would wait for the slot until --min-world-timeout.
TEST_CASE("run: --max-restarts 0: a worker that exits with an error before it registered ends the job at once") {
  Launch l("exit-before-join-norestart");
  l.start({"-n", "2", "--max-restarts", "0", "--summary", l.summary},
          {RF_EXIT_WORKER, "die-before-join", "1", "exit", "4", RF_TEST_WORKER, "--steps", "1000000"});
  const int st = l.wait();
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(st == 4);
  json s = l.summary_json();
  REQUIRE(!s.is_discarded());
  CHECK(s["restarts"] == 0);
  CHECK(s["workers"][1]["spawns"].size() == 1);
  CHECK(s["error"].get<std::string>().find("slot 1 (incarnation 0) exited with status 4 before it registered with "
                                           "the coordinator and has no restarts left (--max-restarts 0): not "
                                           "restarted, the job ends") != std::string::npos);
  CHECK(s["wall_s"].get<double>() < 10.0);
}

// Slot 1's first incarnation exits at step 20 (--inject); each replacement joins and fails
// with the same error (a number in it differs, as a step in a path would). After two
// restarts failing the same way the slot is not restarted into --min-world-timeout (30 s),
// the job stopping for want of members with the cause nowhere; the job stops at
// once with that error. At default timing.
TEST_CASE("run: a worker failing with the same error after each of two restarts stops the job, naming the error") {
  Launch l("same-error");
  const std::string text = "the disk is full (test)";
  l.start_at_defaults({"-n", "2", "--inject", "exit:rank=1:step=20", "--summary", l.summary},
                      {RF_EXIT_WORKER, "fail-after-join", "1", text, RF_TEST_WORKER, "--steps", "1000000", "--step-ms", "5"});
  const int st = l.wait(std::chrono::seconds(25));
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(st == 1);
  json s = l.summary_json();
  REQUIRE(!s.is_discarded());
  const std::string error = s["error"].get<std::string>();
  CHECK(error.find("slot 1 failed with the same error after each of 2 restarts: launcher_exit_worker: error: " + text +
                   " (incarnation 3) -- not restarted again, the job stops") == 0);
  CHECK(error.find("fewer than --min-world 2") != std::string::npos);
  CHECK(out.find("ringfence: error: " + error) != std::string::npos);
  CHECK(s["restarts"] == 3);
  REQUIRE(s["workers"][1]["exits"].size() == 4);
  CHECK(s["workers"][1]["exits"][1]["error"] == "launcher_exit_worker: error: " + text + " (incarnation 1)");
  CHECK(s["wall_s"].get<double>() < 15.0);  // not the 30 s of --min-world-timeout
}

// The same with --min-world 2 of 3: the others go on without the slot, and say so.
TEST_CASE("run: a worker failing with the same error after two restarts is left out where --min-world allows") {
  Launch l("same-error-shrink");
  const std::string text = "the disk is full (test)";
  l.start_at_defaults({"-n", "3", "--min-world", "2", "--inject", "exit:rank=1:step=20", "--summary", l.summary},
                      {RF_EXIT_WORKER, "fail-after-join", "1", text, RF_TEST_WORKER, "--steps", "400", "--step-ms", "5"});
  const int st = l.wait(std::chrono::seconds(40));
  const std::string out = slurp(l.out);
  INFO("output:\n", out);
  CHECK(out.find("slot 1 failed with the same error after each of 2 restarts: launcher_exit_worker: error: " + text +
                 " (incarnation 3) -- not restarted again; the job goes on without it (2 member(s), --min-world 2)") !=
        std::string::npos);
  CHECK(st == 0);
  json s = l.summary_json();
  REQUIRE(!s.is_discarded());
  CHECK(s["phase"] == "DONE");
  CHECK(s["restarts"] == 3);
  CHECK(s["workers"][1]["exits"].size() == 4);
}
