// The job's failed checkpoints as the coordinator counts them from heartbeats
// (elastic/checkpoint_health.h), and the heartbeat's fields that carry them.
#include <doctest/doctest.h>

#include <variant>

#include <nlohmann/json.hpp>

#include "elastic/checkpoint_health.h"
#include "elastic/errors.h"
#include "elastic/messages.h"

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

TEST_CASE("a heartbeat carries a writer's failed checkpoints and the last error; without them, none") {
  Heartbeat sent;
  sent.generation = 2;
  sent.step = 199;
  const Heartbeat quiet = std::get<Heartbeat>(decode_request(encode_request(sent)));
  CHECK_FALSE(quiet.ckpt_failed.has_value());
  sent.ckpt_failed = 2;
  sent.ckpt_error = "/c/.ckpt-000000199.safetensors.tmp: write failed: x";
  const Heartbeat h = std::get<Heartbeat>(decode_request(encode_request(sent)));
  CHECK(h.ckpt_failed == 2);
  CHECK(h.ckpt_error == "/c/.ckpt-000000199.safetensors.tmp: write failed: x");
  // The wire format: a count below zero, an error that is not text.
  auto beat = [](nlohmann::json extra) {
    nlohmann::json m = {{"type", "heartbeat"}, {"generation", 2}, {"step", 199}};
    m.update(extra);
    return std::get<Heartbeat>(decode_request(m));
  };
  CHECK_THROWS_AS(beat({{"ckpt_failed", -1}}), ProtocolError);
  CHECK_THROWS_AS(beat({{"ckpt_failed", 1}, {"ckpt_error", 7}}), ProtocolError);
}

TEST_CASE("a leave carries the count at the end, however short the job") {
  const auto leave = std::get<Leave>(decode_request(encode_request(Leave{39, 1, "fsync failed"})));
  CHECK(leave.step == 39);
  CHECK(leave.ckpt_failed == 1);
  CHECK(leave.ckpt_error == "fsync failed");
  CHECK_FALSE(std::get<Leave>(decode_request(encode_request(Leave{39, std::nullopt, ""}))).ckpt_failed.has_value());
}
