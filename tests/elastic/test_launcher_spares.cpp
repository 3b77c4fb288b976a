// `ringfence run --spares`: what counts as a spare when a member dies. Only a worker the
// coordinator knows as a standby (registered, not a member) can fill the hole; a local
// process that is still starting up (the held restart just released, which has not
// reached the coordinator yet) cannot, so the dead slot must restart at once instead of
// being held for a spare that is not there (held until --min-world-timeout before).
//
// The workers run through a small shell wrapper that records each worker's pid and holds
// slot 1's incarnation 1 in its "start-up" until the test opens a gate file: a start-up
// as slow as we like, with every step taken on a condition the test sees, never a sleep.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>

#include "tests/elastic/proc.h"

using namespace rf::test;
using namespace std::chrono_literals;

namespace {

constexpr const char* kWrapper = R"(#!/bin/sh
# wrap.sh DIR PROGRAM ARGS...: records the pid (exec keeps it) per slot and incarnation;
# slot 1 incarnation 1 says it is starting, then waits for DIR/gate before it runs.
d="$1"; shift
echo $$ > "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION.tmp"
mv "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION.tmp" "$d/pid-$RINGFENCE_SLOT-$RINGFENCE_INCARNATION"
if [ "$RINGFENCE_SLOT" = 1 ] && [ "$RINGFENCE_INCARNATION" = 1 ]; then
  : > "$d/starting"
  while [ ! -e "$d/gate" ]; do sleep 0.02; done
fi
exec "$@"
)";

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

// Waits (re-reading, bounded by the deadline) until the file at `path` contains `text`.
bool wait_text(const std::string& path, const std::string& text, rf::Duration timeout) {
  const auto deadline = rf::Clock::now() + capped(timeout);
  while (slurp(path).find(text) == std::string::npos) {
    if (rf::Clock::now() >= deadline) return false;
    ::poll(nullptr, 0, 3);
  }
  return true;
}

pid_t read_pid(const std::string& path) {
  std::ifstream f(path);
  long pid = -1;
  f >> pid;
  return static_cast<pid_t>(pid);
}

}  // namespace

TEST_CASE("run --spares: a spare still starting up does not hold the dead slot's restart") {
  const std::string dir = temp_dir("run-spare-starting");
  TempDirGuard cleanup{dir};
  const std::string out = dir + "/launcher.log", summary = dir + "/summary.json", log = dir + "/events.jsonl";
  {
    std::ofstream w(dir + "/wrap.sh");
    w << kWrapper;
  }
  // --min-world-timeout 6s: what a restart held for a spare that never registers waits.
  constexpr double kMinWorldTimeoutMs = 6000.0;
  Proc launcher({RF_RINGFENCE, "run", "-n", "2", "--spares", "1", "--min-world-timeout", "6s", "--heartbeat", "50ms",
                 "--lease", "500ms", "--summary", summary, "--event-log", log, "--", "/bin/sh", dir + "/wrap.sh", dir,
                 RF_TEST_WORKER, "--steps", "300", "--step-ms", "10"},
                {}, out);
  INFO("launcher output:\n", slurp(out));

  // 1. A member (slot 1) dies in training: the registered spare (slot 2) takes the hole and
  //    slot 1's restart is held until that recovery has completed (7385e2e's ordering).
  //    (Once the launcher has seen generation 1 RUNNING and the spare registered: its
  //    status line says so.)
  REQUIRE_MESSAGE(wait_text(out, "ringfence: g 1 RUNNING | members 2/2 | standby 1 |", 30s),
                  "the launcher never saw generation 1 RUNNING with the spare standing by");
  const pid_t slot1 = read_pid(dir + "/pid-1-0");
  REQUIRE(slot1 > 0);
  ::kill(-slot1, SIGKILL);
  // 2. The held restart (slot 1, incarnation 1: the next spare) is released and starts,
  //    but stays in its start-up: a local process, not a registered standby.
  REQUIRE_MESSAGE(wait_file(dir + "/starting", 30s), "slot 1's restart never started:\n", slurp(out));
  // 3. The other original member dies while that spare is still starting.
  const pid_t slot0 = read_pid(dir + "/pid-0-0");
  REQUIRE(slot0 > 0);
  ::kill(-slot0, SIGKILL);
  auto revoke = wait_event(
      log,
      [](const json& e) {
        return e.value("event", "") == "revoke" && e["worker"].is_object() && e["worker"]["slot"] == 0 &&
               e["worker"]["incarnation"] == 0;
      },
      30s);
  REQUIRE(revoke);
  const int64_t g = (*revoke)["g"].get<int64_t>();
  // 4. The job recovers without the starting spare: slot 0's restart fills the hole. Only
  //    then does the gate open (the spare finishes its start-up and stands by to the end).
  auto running = wait_event(
      log, [g](const json& e) { return e.value("event", "") == "running" && e.value("g", int64_t{-1}) >= g; }, 30s);
  CHECK_MESSAGE(running, "no recovery from slot 0's death without the starting spare");
  { std::ofstream gate(dir + "/gate"); }
  auto code = launcher.wait(60s);
  REQUIRE_MESSAGE(code.has_value(), "launcher still running");
  CHECK(*code == 0);

  const std::string text = slurp(out);
  const json s = json::parse(slurp(summary), nullptr, false);
  REQUIRE(!s.is_discarded());
  CHECK(s["phase"] == "DONE");
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
  const json* rec = nullptr;
  for (const auto& r : s["recoveries"])
    if (r["worker"]["slot"] == 0 && r["worker"]["incarnation"] == 0) rec = &r;
  REQUIRE(rec);
  MESSAGE("recovery from slot 0's death: ", rec->dump());
  CHECK((*rec)["finished"] == true);
  CHECK((*rec)["world"] == 2);
  CHECK((*rec)["total_ms"].get<double>() < kMinWorldTimeoutMs / 2);
}
