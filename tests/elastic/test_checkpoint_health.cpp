// The job's failed checkpoints as the coordinator counts them from heartbeats
// (elastic/checkpoint_health.h).
#include <doctest/doctest.h>

#include "elastic/checkpoint_health.h"

using namespace rf::elastic;

TEST_CASE("checkpoint health: the sum of every writer's last count; only growth is news") {
  CheckpointHealth h;
  CHECK(h.total() == 0);
  CHECK_FALSE(h.observe({0, 0}, 0, ""));       // a writer without failures
  CHECK(h.observe({0, 0}, 1, "ENOSPC at 199"));
  CHECK_FALSE(h.observe({0, 0}, 1, "ENOSPC at 199"));  // every heartbeat repeats it
  CHECK(h.observe({0, 0}, 3, "ENOSPC at 399"));
  CHECK(h.total() == 3);
  CHECK(h.last_error() == "ENOSPC at 399");
  CHECK_FALSE(h.observe({0, 0}, 2, "late"));   // a reordered heartbeat
  CHECK(h.observe({0, 1}, 1, "EIO at 499"));   // the replacement counts from zero
  CHECK(h.observe({1, 0}, 1, "EIO at 599"));   // another writer (rank 0 moved)
  CHECK(h.total() == 5);
  CHECK(h.last_error() == "EIO at 599");
}
