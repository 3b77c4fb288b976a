#include <doctest/doctest.h>

#include <string>

#include "base/log.h"

TEST_CASE("a log line names the level and subsystem, and the place in the job once it is known") {
  CHECK(rf::log::format_line(rf::log::Level::warn, "ckpt", "disk full") == "ringfence warn ckpt: disk full");
  rf::log::set_slot(1);
  CHECK(rf::log::format_line(rf::log::Level::info, "worker", "up") == "ringfence [1/- g- s-] info worker: up");
  rf::log::set_rank(0);
  rf::log::set_generation(3);
  rf::log::set_step(150);
  CHECK(rf::log::format_line(rf::log::Level::error, "comm", "x") == "ringfence [1/0 g3 s150] error comm: x");
  rf::log::set_slot(-1);  // back to a process outside the job, for the other tests
}

TEST_CASE("lines below the level are not written") {
  rf::log::set_level(rf::log::Level::warn);
  CHECK_FALSE(rf::log::enabled(rf::log::Level::info));
  CHECK(rf::log::enabled(rf::log::Level::error));
  rf::log::set_level(rf::log::Level::info);
  CHECK(rf::log::enabled(rf::log::Level::info));
  CHECK_FALSE(rf::log::enabled(rf::log::Level::debug));
}

TEST_CASE("first() is true once per flag") {
  std::atomic<bool> said{false};
  CHECK(rf::log::first(said));
  CHECK_FALSE(rf::log::first(said));
}
