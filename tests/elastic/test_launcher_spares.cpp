// `ringfence run --spares`: what counts as a spare when a member dies. Only a worker the
// coordinator knows as a standby (registered, not a member) can fill the hole; a local
// process that is still starting up (a restart that has not reached the coordinator yet)
// cannot. So the dead slot restarts at once when no registered spare stands by, and a
// restart held for a spare is released as soon as that spare is gone before it filled the
// hole — before, both waited for --min-world-timeout with nobody to fill the hole. A
// restart that reaches the coordinator only after the job ended is no failure.
//
// The workers run through a small shell wrapper that records each worker's pid and holds
// one (slot, incarnation) in its "start-up" until the test opens a gate file: a start-up
// as slow as we like, with every step taken on a condition the test sees, never a sleep.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>

#include "tests/elastic/proc.h"

using namespace rf::test;
using namespace std::chrono_literals;

namespace {

constexpr const char* kWrapper = R"(#!/bin/sh
# wrap.sh DIR SLOT INCARNATION PROGRAM ARGS...: records the pid (exec keeps it) per slot
# and incarnation; the worker SLOT/INCARNATION says it is starting, then waits for DIR/gate.
d="$1"; gate_slot="$2"; gate_inc="$3"; shift 3
echo $$ > "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION.tmp"
mv "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION.tmp" "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION"
if [ "$RINGFENCE_SLOT" = "$gate_slot" ] && [ "$RINGFENCE_INCARNATION" = "$gate_inc" ]; then
  : > "$d/starting"
  while [ ! -e "$d/gate" ]; do sleep 0.02; done
fi
exec "$@"
)";

// --min-world-timeout of every job here: how long a restart held for a spare that never
// fills the hole would wait; the recoveries must take far less.
constexpr double kMinWorldTimeoutMs = 6000.0;

bool exists(const std::string& p) {
  struct stat sb {};
  return ::stat(p.c_str(), &sb) == 0;
}

// Waits (re-checking, bounded by the deadline) until `path` exists.
bool wait_file(const std::string& path, rf::Duration timeout) {
  const auto deadline = rf::Clock::now() + capped(timeout);
  while (!exists(path)) {
    if (rf::Clock::now() >= deadline) return false;
    ::poll(nullptr, 0, 3);
  }
  return true;
}

// `ringfence run -n 2 --spares 1` (slots 0, 1; spare 2) of the test worker through the
// wrapper, holding worker gate_slot/gate_incarnation in its start-up.
struct SpareJob {
  std::string dir, out, summary, log;
  TempDirGuard cleanup;  // destroyed after launcher: the launcher is reaped first
  Proc launcher;
  SpareJob(const std::string& name, int gate_slot, int gate_incarnation, const std::string& lease)
      : dir(temp_dir(name)), cleanup{dir} {
    out = dir + "/launcher.log";
    summary = dir + "/summary.json";
    log = dir + "/events.jsonl";
    {
      std::ofstream w(dir + "/wrap.sh");
      w << kWrapper;
    }
    launcher = Proc({RF_RINGFENCE, "run", "-n", "2", "--spares", "1", "--min-world-timeout", "6s", "--heartbeat",
                     "50ms", "--lease", lease, "--summary", summary, "--event-log", log, "--", "/bin/sh",
                     dir + "/wrap.sh", dir, std::to_string(gate_slot), std::to_string(gate_incarnation),
                     RF_TEST_WORKER, "--steps", "300", "--step-ms", "10"},
                    {}, out);
  }
  // Signals the process group of worker slot/incarnation (its pid as the wrapper wrote it).
  void signal(int slot, int incarnation, int sig) {
    std::ifstream f(dir + "/pid-" + std::to_string(slot) + "-" + std::to_string(incarnation));
    long pid = -1;
    f >> pid;
    REQUIRE_MESSAGE(pid > 0, "no pid for slot ", slot, " incarnation ", incarnation);
    ::kill(-static_cast<pid_t>(pid), sig);
  }
  // Once the launcher has seen generation 1 RUNNING and the spare registered: its status
  // line says so (printed when either changes).
  void wait_spare_standing_by() {
    REQUIRE_MESSAGE(wait_text(out, "ringfence: g 1 RUNNING | members 2/2 | standby 1 |", 30s),
                    "the launcher never saw generation 1 RUNNING with the spare standing by");
  }
  // The first "running" event of generation >= the one a failure of slot/incarnation
  // revoked into: the recovery from that failure has completed.
  std::optional<json> wait_recovered_from(int slot, int incarnation) {
    auto revoke = wait_event(
        log,
        [&](const json& e) {
          return e.value("event", "") == "revoke" && e["worker"].is_object() && e["worker"]["slot"] == slot &&
                 e["worker"]["incarnation"] == incarnation;
        },
        30s);
    if (!revoke) return std::nullopt;
    const int64_t g = (*revoke)["g"].get<int64_t>();
    return wait_event(
        log, [g](const json& e) { return e.value("event", "") == "running" && e.value("g", int64_t{-1}) >= g; },
        30s);
  }
  // Slot 1 (a member) SIGKILLed once the spare stands by: the spare takes the hole, and slot
  // 1's restart (incarnation 1), released after that recovery, is held in its start-up.
  void kill_member_until_its_restart_starts() {
    wait_spare_standing_by();
    signal(1, 0, SIGKILL);
    REQUIRE_MESSAGE(wait_file(dir + "/starting", 30s), "slot 1's restart never started");
  }
  void open_gate() { std::ofstream gate(dir + "/gate"); }
  json finish() {
    auto code = launcher.wait(60s);
    REQUIRE_MESSAGE(code.has_value(), "launcher still running");
    CHECK(*code == 0);
    const json s = json::parse(slurp(summary), nullptr, false);
    REQUIRE(!s.is_discarded());
    CHECK(s["phase"] == "DONE");
    return s;
  }
};

// The summary's recovery from the failure of slot/incarnation (null if none).
const json* recovery_of(const json& s, int slot, int incarnation) {
  const json* rec = nullptr;
  for (const auto& r : s["recoveries"])
    if (r["worker"]["slot"] == slot && r["worker"]["incarnation"] == incarnation) rec = &r;
  return rec;
}

}  // namespace

TEST_CASE("run --spares: a spare still starting up does not hold the dead slot's restart") {
  SpareJob j("run-spare-starting", 1, 1, "500ms");
  INFO("launcher output:\n", slurp(j.out));
  // 1. A member (slot 1) dies in training: the registered spare (slot 2) takes the hole and
  //    slot 1's restart is held until that recovery has completed (7385e2e's ordering).
  // 2. The held restart (slot 1, incarnation 1: the next spare) is released and starts,
  //    but stays in its start-up: a local process, not a registered standby.
  j.kill_member_until_its_restart_starts();
  // 3. The other original member dies while that spare is still starting.
  j.signal(0, 0, SIGKILL);
  // 4. The job recovers without the starting spare: slot 0's restart fills the hole. Only
  //    then does the gate open (the spare finishes its start-up and stands by to the end).
  CHECK_MESSAGE(j.wait_recovered_from(0, 0), "no recovery from slot 0's death without the starting spare");
  j.open_gate();
  const json s = j.finish();

  const std::string text = slurp(j.out);
  // The first failure kept the ordering guarantee: held for the registered spare.
  CHECK(text.find("slot 1 exited (status -9): a spare takes its place") != std::string::npos);
  const json& w1 = s["workers"][1];
  REQUIRE(w1["spawns"].size() == 2);
  CHECK(w1["spawns"][1]["reason"].get<std::string>().find("completed (T ") != std::string::npos);
  // The second was not held: no spare was registered, so slot 0 restarted at once ...
  CHECK(text.find("slot 0 exited (status -9): a spare takes its place") == std::string::npos);
  const json& w0 = s["workers"][0];
  REQUIRE(w0["spawns"].size() == 2);
  REQUIRE(w0["exits"].size() >= 1);
  const json& respawn = w0["spawns"][1];
  MESSAGE("slot 0 respawn: ", respawn.dump());
  CHECK(respawn["reason"] == "restart");
  CHECK_FALSE(respawn.contains("held_ms"));
  const double exit_to_spawn_ms =
      (respawn["wall_us"].get<double>() - w0["exits"][0]["wall_us"].get<double>()) / 1000.0;
  CHECK(exit_to_spawn_ms < kMinWorldTimeoutMs / 2);
  // ... and the recovery from its death did not wait for --min-world-timeout.
  const json* rec = recovery_of(s, 0, 0);
  REQUIRE(rec);
  MESSAGE("recovery from slot 0's death: ", rec->dump());
  CHECK((*rec)["finished"] == true);
  CHECK((*rec)["world"] == 2);
  CHECK((*rec)["total_ms"].get<double>() < kMinWorldTimeoutMs / 2);
}

TEST_CASE("run --spares: a held restart starts once the spare it counted on is gone before filling the hole") {
  // Lease 1 s: the frozen spare stays registered (and counted) until the launcher has
  // reaped the member killed right after it froze.
  SpareJob j("run-spare-gone", 2, 1, "1s");
  INFO("launcher output:\n", slurp(j.out));
  j.wait_spare_standing_by();
  // 1. The spare freezes (SIGSTOP), then a member (slot 1) dies: the launcher still sees a
  //    registered spare, so slot 1's restart is held for it.
  j.signal(2, 0, SIGSTOP);
  j.signal(1, 0, SIGKILL);
  // 2. The frozen spare cannot get ready for the plan it was placed in: its lease expires,
  //    it is evicted and SIGKILLed, and its restart (slot 2, incarnation 1) stays in its
  //    start-up: nobody registered is left to fill slot 1's hole.
  REQUIRE_MESSAGE(wait_file(j.dir + "/starting", 30s), "the spare's restart never started");
  // 3. Slot 1's held restart must start now, not after --min-world-timeout; the gate opens
  //    once the job has recovered.
  CHECK_MESSAGE(j.wait_recovered_from(1, 0), "no recovery from slot 1's death");
  j.open_gate();
  const json s = j.finish();

  const std::string text = slurp(j.out);
  CHECK(text.find("slot 1 exited (status -9): a spare takes its place") != std::string::npos);
  CHECK(text.find("slot 2 (incarnation 0) was evicted as hung: SIGKILL") != std::string::npos);
  const json& w1 = s["workers"][1];
  REQUIRE(w1["spawns"].size() == 2);
  const json& respawn = w1["spawns"][1];
  MESSAGE("slot 1 respawn: ", respawn.dump());
  CHECK(respawn["reason"].get<std::string>().find("the spare it waited for is gone") != std::string::npos);
  REQUIRE(respawn["held_ms"].is_number());
  CHECK(respawn["held_ms"].get<double>() < kMinWorldTimeoutMs / 2);
  const json* rec = recovery_of(s, 1, 0);
  REQUIRE(rec);
  MESSAGE("recovery from slot 1's death: ", rec->dump());
  CHECK((*rec)["finished"] == true);
  CHECK((*rec)["world"] == 2);
  CHECK((*rec)["total_ms"].get<double>() < kMinWorldTimeoutMs / 2);
}

// A restart released after the recovery its spare served may finish its start-up only
// after every member has left (a large model's start-up takes seconds). It then finds the
// job over: it ends cleanly (JobFinished at its join) and the job ends DONE, exit 0 —
// before, its join was refused as an error, it exited 1, and the launcher reported a job
// that had succeeded as 'exited with status 1 after the job was DONE' (exit 1), as
// `recovery_bench.py --models big --spares 1` did in the session-5 final run.
TEST_CASE("run --spares: a restart that finishes its start-up after the job ended is no failure") {
  SpareJob j("run-spare-late", 1, 1, "500ms");
  INFO("launcher output:\n", slurp(j.out));
  // The spare fills the hole; slot 1's restart is released once that recovery completed
  // and is held in its start-up until the job is over.
  j.kill_member_until_its_restart_starts();
  REQUIRE_MESSAGE(wait_event(j.log, is_event("done"), 60s), "the job never ended");
  j.open_gate();
  const json s = j.finish();  // exit 0, DONE
  const std::string text = slurp(j.out);
  CHECK(text.find("after the job was DONE") == std::string::npos);
  const json& w1 = s["workers"][1];
  REQUIRE(w1["exits"].size() == 2);
  CHECK(w1["exits"][1]["incarnation"] == 1);
  CHECK(w1["exits"][1]["status"] == 0);
}
