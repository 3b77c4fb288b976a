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
