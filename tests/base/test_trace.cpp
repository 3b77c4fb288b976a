// Tracer (base/trace.h): what it writes is one Chrome trace event per line, readable while
// the process runs (flush), in the order recorded; a full ring drops and counts instead of
// blocking the recording thread; a disabled tracer writes nothing.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/trace.h"

namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::string temp_path(const char* name) { return std::string("/tmp/rf_test_trace_") + std::to_string(getpid()) + name; }

}  // namespace

TEST_CASE("tracer: spans and instants as Chrome trace lines, readable after flush") {
  const std::string path = temp_path("_a.jsonl");
  {
    rf::Tracer t(path);
    REQUIRE(t.enabled());
    const rf::TimePoint t0 = rf::Clock::now();
    t.span("forward", rf::Tracer::kTrain, t0, t0 + std::chrono::microseconds(250), {.step = 7, .generation = 2, .rank = 1});
    t.span("allreduce", rf::Tracer::kComm + 1, t0, t0 + std::chrono::milliseconds(1),
           {.step = 7, .generation = 2, .rank = 1, .bucket = 1});
    t.instant_any("revoked", "a \"quoted\" cause\n", {.generation = 3});
    t.flush();
    const auto lines = read_lines(path);  // while the tracer is alive: a killed process leaves this much
    REQUIRE(lines.size() == 3);
    CHECK(lines[0]["name"] == "forward");
    CHECK(lines[0]["ph"] == "X");
    CHECK(lines[0]["dur"] == 250);
    CHECK(lines[0]["tid"] == rf::Tracer::kTrain);
    CHECK(lines[0]["args"]["step"] == 7);
    CHECK(lines[0]["args"]["g"] == 2);
    CHECK(lines[0]["args"]["rank"] == 1);
    CHECK(lines[1]["tid"] == rf::Tracer::kComm + 1);
    CHECK(lines[1]["args"]["bucket"] == 1);
    CHECK(lines[2]["name"] == "revoked");
    CHECK(lines[2]["ph"] == "i");
    CHECK(lines[2]["args"]["detail"] == "a \"quoted\" cause\n");
    // The wall clock: within a second of now.
    const int64_t ts = lines[0]["ts"].get<int64_t>();
    CHECK(std::llabs(ts - rf::wall_us()) < 1'000'000);
  }
  std::remove(path.c_str());
}

TEST_CASE("tracer: the writer thread drains without flush, and the destructor writes the rest") {
  const std::string path = temp_path("_b.jsonl");
  {
    rf::Tracer t(path, 1024, std::chrono::milliseconds(5));
    const rf::TimePoint t0 = rf::Clock::now();
    for (int i = 0; i < 100; ++i) t.span("step", rf::Tracer::kTrain, t0, t0, {.step = i});
    const rf::TimePoint deadline = rf::Clock::now() + std::chrono::seconds(5);
    while (read_lines(path).size() < 100 && rf::Clock::now() < deadline) usleep(2000);
    CHECK(read_lines(path).size() == 100);
    for (int i = 100; i < 110; ++i) t.span("step", rf::Tracer::kTrain, t0, t0, {.step = i});
  }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 110);
  for (int i = 0; i < 110; ++i) CHECK(lines[i]["args"]["step"] == i);
  std::remove(path.c_str());
}

TEST_CASE("tracer: a full ring drops and counts, it never waits") {
  const std::string path = temp_path("_c.jsonl");
  {
    // A flush period far longer than the test: nothing drains until the destructor.
    rf::Tracer t(path, 8, std::chrono::hours(1));
    const rf::TimePoint t0 = rf::Clock::now();
    for (int i = 0; i < 20; ++i) t.span("step", rf::Tracer::kTrain, t0, t0, {.step = i});
    CHECK(t.dropped() == 12);
  }
  const auto lines = read_lines(path);
  REQUIRE(lines.size() == 9);  // the 8 the ring held, then the count of the dropped
  CHECK(lines[7]["args"]["step"] == 7);
  CHECK(lines[8]["name"] == "trace_dropped");
  CHECK(lines[8]["args"]["spans"] == 12);
  std::remove(path.c_str());
}

TEST_CASE("tracer: disabled writes nothing and costs a branch") {
  rf::Tracer t;
  CHECK_FALSE(t.enabled());
  t.span("step", rf::Tracer::kTrain, rf::Clock::now(), rf::Clock::now());
  t.instant_any("x", "y");
  t.flush();
  CHECK(t.dropped() == 0);
}

TEST_CASE("tracer: an unopenable path throws naming it") {
  CHECK_THROWS_WITH_AS(rf::Tracer("/nonexistent-dir/x.jsonl"),
                       doctest::Contains("/nonexistent-dir/x.jsonl"), rf::Error);
}
