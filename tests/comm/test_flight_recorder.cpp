#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/flight_recorder.h"

using rf::comm::FlightRecord;
using rf::comm::FlightRecorder;

TEST_CASE("the flight recorder keeps the last N records, oldest first") {
  FlightRecorder fr(3, 2);
  for (uint64_t s = 0; s < 5; ++s) {
    const uint64_t seq = fr.start("all-reduce", 3, s, 1, 4096);
    if (s < 4) fr.finish(seq, 7, -1);
  }
  const auto recs = fr.snapshot();
  REQUIRE(recs.size() == 3);
  CHECK(recs[0].step == 2);
  CHECK(recs[2].step == 4);
  CHECK(recs[1].state == FlightRecord::State::done);
  CHECK(recs[2].state == FlightRecord::State::started);
  CHECK(recs[1].end_us >= recs[1].start_us);
  // Updating a record that fell out of the ring is a no-op, not a corruption.
  fr.finish(0, 1, 1);
  CHECK(fr.snapshot()[0].step == 2);
}

TEST_CASE("a failed record dumps as one JSON line naming tag, peer, chunk and cause") {
  FlightRecorder fr(4, 2);
  const uint64_t seq = fr.start("all-reduce", 3, 812, 1, 1 << 20);
  fr.fail(seq, 5, 1, "peer 1 failed (\"reset\")");
  std::ostringstream out;
  fr.dump(out);
  const auto j = nlohmann::json::parse(out.str());
  CHECK(j["rank"] == 2);
  CHECK(j["tag"] == "g=3 s=812 op=1");
  CHECK(j["chunk"] == 5);
  CHECK(j["peer"] == 1);
  CHECK(j["state"] == "failed");
  CHECK(j["bytes"] == (1 << 20));
  CHECK(j["cause"] == "peer 1 failed (\"reset\")");
  CHECK(j["elapsed_us"].get<int64_t>() >= 0);
}

TEST_CASE("every record carries the phase label current when it started") {
  FlightRecorder fr(4, 0);
  rf::comm::set_phase_label("train");
  const uint64_t a = fr.start("all-reduce", 2, 10, 1, 64);
  rf::comm::set_phase_label("transfer");
  CHECK(std::string(rf::comm::phase_label()) == "transfer");
  const uint64_t b = fr.start("recv", 3, 11, 7, 64);
  fr.fail(b, -1, 1, "peer 1 failed");
  rf::comm::set_phase_label("train");  // the same text again: the same interned label
  fr.finish(a, 0, -1);
  const auto recs = fr.snapshot();
  REQUIRE(recs.size() == 2);
  CHECK(std::string(recs[0].phase) == "train");
  CHECK(std::string(recs[1].phase) == "transfer");
  std::ostringstream out;
  fr.dump(out);
  std::istringstream lines(out.str());
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  CHECK(nlohmann::json::parse(first)["phase"] == "train");
  CHECK(nlohmann::json::parse(second)["phase"] == "transfer");
  rf::comm::set_phase_label("");
}
