// The launcher's restart policy (apps/ringfence/restart_policy.h): a worker failing with
// the same error after each of two restarts is not restarted into a min-world timeout.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "apps/ringfence/restart_policy.h"

using namespace rf::apps;

namespace {
const std::string kFull = "train_mlp: error: /mnt/c/.ckpt-000000199.safetensors.tmp: write failed: No space left on device";
const std::string kFull2 = "train_mlp: error: /mnt/c/.ckpt-000000299.safetensors.tmp: write failed: No space left on device";
}  // namespace

TEST_CASE("error_signature: the same failure at another step or in another file reads the same") {
  CHECK(error_signature(kFull) == error_signature(kFull2));
  CHECK(error_signature("pid 123 at step 4") == "pid # at step #");
  CHECK(error_signature("write failed") != error_signature("fsync failed"));
  CHECK(error_signature("") == "");
}

TEST_CASE("decide_restart: restarts until the same error came back after each of two restarts") {
  RestartInput in{.slot = 0, .errors = {kFull}, .restarts = 0, .max_restarts = 3, .others = 1, .min_world = 2};
  CHECK(decide_restart(in).action == RestartAction::Restart);
  in.errors = {kFull, kFull2};
  in.restarts = 1;
  CHECK(decide_restart(in).action == RestartAction::Restart);  // one restart failed the same way: once more
  in.errors = {kFull, kFull2, kFull};
  in.restarts = 2;
  const RestartDecision d = decide_restart(in);
  CHECK(d.action == RestartAction::StopJob);  // without slot 0: 1 member, below --min-world 2
  CHECK(d.reason.find("slot 0 failed with the same error after each of 2 restarts: " + kFull) == 0);
  CHECK(d.reason.find("fewer than --min-world 2") != std::string::npos);

  in.min_world = 1;  // the others can go on without it
  const RestartDecision g = decide_restart(in);
  CHECK(g.action == RestartAction::GoOnWithout);
  CHECK(g.reason.find("the job goes on without it (1 member(s), --min-world 1)") != std::string::npos);
}

TEST_CASE("decide_restart: other errors, untold exits and crashes are restarted up to --max-restarts") {
  RestartInput in{.slot = 2, .errors = {"a", "b", "a"}, .restarts = 2, .max_restarts = 3, .others = 3, .min_world = 4};
  CHECK(decide_restart(in).action == RestartAction::Restart);
  in.errors = {"", "", ""};  // killed by signals, or said nothing: never "the same error"
  CHECK(decide_restart(in).action == RestartAction::Restart);
  in.errors = {"x", "", "x"};
  CHECK(decide_restart(in).action == RestartAction::Restart);
  in.errors = {"a", "b", "c", "d"};
  in.restarts = 3;
  CHECK(decide_restart(in).action == RestartAction::NoRestartsLeft);
  in.errors = {"b", "a", "a", "a"};  // the last three agree: the same error after two restarts
  CHECK(decide_restart(in).action == RestartAction::StopJob);
  in = {.slot = 1, .errors = {"a"}, .restarts = 0, .max_restarts = 0, .others = 1, .min_world = 1};
  CHECK(decide_restart(in).action == RestartAction::NoRestartsLeft);
}

namespace {
const RestartOptions kOpt{.max_restarts = 3, .min_world = 2};
WorkerExit exit_of(int status, std::vector<std::string> errors = {""}) {
  return {.slot = 1, .incarnation = 0, .status = status, .registered = true, .left = false, .start_error_before = false,
          .restarts = 0, .errors = std::move(errors)};
}
}  // namespace

TEST_CASE("decide_exit: a clean exit, a stopping or finished job, and a worker that left are not restarted") {
  const JobView running{.ran = true, .others = 1};
  CHECK(decide_exit(exit_of(0), running, kOpt).action == ExitAction::Finished);
  CHECK(decide_exit(exit_of(-9), {.ran = true, .stopping = true}, kOpt).action == ExitAction::Finished);
  const ExitDecision done = decide_exit(exit_of(1), {.ran = true, .done = true, .over = true}, kOpt);
  CHECK(done.action == ExitAction::Finished);
  CHECK(done.late_failure == "slot 1 (incarnation 0) exited with status 1 after the job was DONE");
  WorkerExit left = exit_of(3);
  left.left = true;
  const ExitDecision l = decide_exit(left, running, kOpt);
  CHECK(l.action == ExitAction::Finished);
  CHECK(l.late_failure == "slot 1 (incarnation 0) exited with status 3 after it left the job");
  REQUIRE(l.notes.size() == 1);
  CHECK(l.notes[0] == l.late_failure + ": not restarted");
}

TEST_CASE("decide_exit: a crash is restarted, held for a spare that takes its place, until --max-restarts") {
  CHECK(decide_exit(exit_of(-9), {.ran = true, .others = 1}, kOpt).action == ExitAction::Restart);
  CHECK(decide_exit(exit_of(-9), {.ran = true, .others = 1, .was_member = true, .spare_available = true}, kOpt).action ==
        ExitAction::RestartHeld);
  CHECK(decide_exit(exit_of(-9), {.ran = true, .others = 1, .spare_available = true}, kOpt).action == ExitAction::Restart);
  WorkerExit spent = exit_of(-9);
  spent.restarts = 3;
  CHECK(decide_exit(spent, {.ran = true, .others = 1}, kOpt).action == ExitAction::NoRestartsLeft);
}

TEST_CASE("decide_exit: an error before registering is restarted once, then ends the job with its status") {
  WorkerExit e = exit_of(2);
  e.registered = false;
  const ExitDecision first = decide_exit(e, {}, kOpt);
  CHECK(first.action == ExitAction::Restart);
  CHECK(first.start_error);
  REQUIRE(first.notes.size() == 1);
  CHECK(first.notes[0].find("restarted once (the same again ends the job)") != std::string::npos);
  e.incarnation = 1;
  e.restarts = 1;
  e.start_error_before = true;
  const ExitDecision second = decide_exit(e, {}, kOpt);
  CHECK(second.action == ExitAction::StopJob);
  CHECK(second.start_failure == 2);
  CHECK(second.error.find("before it registered with the coordinator, as incarnation 0 did") != std::string::npos);
  WorkerExit killed = exit_of(-9);  // a signal before registering: a crash, restarted
  killed.registered = false;
  const ExitDecision k = decide_exit(killed, {}, kOpt);
  CHECK(k.action == ExitAction::Restart);
  REQUIRE(k.notes.size() == 1);
  CHECK(k.notes[0].find("was killed by signal 9 before it registered") != std::string::npos);
}

TEST_CASE("decide_exit: the same error after two restarts stops the job, or goes on where --min-world allows") {
  WorkerExit e = exit_of(1, {kFull, kFull2, kFull});
  e.restarts = 2;
  const ExitDecision stop = decide_exit(e, {.ran = true, .others = 1}, kOpt);
  CHECK(stop.action == ExitAction::StopJob);
  CHECK(stop.error.find("slot 1 failed with the same error after each of 2 restarts") == 0);
  CHECK_FALSE(stop.start_failure.has_value());
  const ExitDecision go = decide_exit(e, {.ran = true, .others = 2}, kOpt);
  CHECK(go.action == ExitAction::GoOnWithout);
  REQUIRE(go.notes.size() == 1);
  CHECK(go.notes[0].find("the job goes on without it") != std::string::npos);
}

TEST_CASE("decide_held_release: a held restart starts once its recovery completed, its spare is gone, or at the timeout") {
  using namespace std::chrono_literals;
  const rf::TimePoint t0{};  // a simulated clock
  const HeldRestart held{.since = t0, .finished = 1, .target = std::nullopt};
  HeldView v{.running = true, .finished = 1, .generation = 3, .step = 40, .spares_missing = 0};
  CHECK(decide_held_release(t0 + 1s, held, v, 30s).action == HeldAction::Wait);  // no recovery finished yet
  v.finished = 2;
  CHECK(decide_held_release(t0 + 1s, held, v, 30s).action == HeldAction::NeedTarget);
  HeldRestart known = held;
  known.target = 40;
  CHECK(decide_held_release(t0 + 1s, known, v, 30s).action == HeldAction::Wait);  // step T itself not done yet
  v.step = 41;
  const HeldDecision done = decide_held_release(t0 + 1s, known, v, 30s);
  CHECK(done.action == HeldAction::Start);
  CHECK(done.next_spare);
  CHECK(done.reason == "recovery to generation 3 completed (T 40, step 41 done)");
  // Still recovering: the spare it waited for is gone, or the timeout passed.
  const HeldView recovering{.running = false, .finished = 1, .generation = 3, .step = 40, .spares_missing = 1};
  const HeldDecision gone = decide_held_release(t0 + 1s, held, recovering, 30s);
  CHECK(gone.action == HeldAction::Start);
  CHECK_FALSE(gone.next_spare);
  HeldView waiting = recovering;
  waiting.spares_missing = 0;
  CHECK(decide_held_release(t0 + 29s, held, waiting, 30s).action == HeldAction::Wait);
  const HeldDecision late = decide_held_release(t0 + 30s, held, waiting, 30s);
  CHECK(late.action == HeldAction::Start);
  CHECK(late.reason == "no completed recovery within --min-world-timeout");
  CHECK(std::string(to_string(HeldAction::NeedTarget)) == "need_target");
}
