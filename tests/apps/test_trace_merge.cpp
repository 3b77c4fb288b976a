// `ringfence run --trace`'s merge (apps/ringfence/trace_merge.h) and the timeline page
// (timeline_html.h) on hand-written parts: a killed worker's partial last line is skipped
// and counted, every event lands on its slot's process and its incarnation's thread, an
// appended event log keeps only this run's lines, and the page carries the attributes the
// browser test selects on. Also the flag and the worker's variable that start it all.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/ringfence/timeline_html.h"
#include "apps/ringfence/trace_merge.h"
#include "elastic/worker_env.h"
#include "elastic/launch_options.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("rf_test_trace_merge_" + std::to_string(getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
};

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

const json* find(const json& events, const std::string& name, int pid, int64_t tid) {
  for (const json& e : events)
    if (e.value("name", "") == name && e.value("pid", -1) == pid && e.value("tid", int64_t{-1}) == tid) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("trace merge: parts onto one timeline, a killed worker's partial line skipped") {
  TempDir tmp;
  const std::string trace = (tmp.dir / "t.json").string();
  rf::apps::prepare_trace_parts(trace);
  write(rf::apps::trace_part_path(trace, 0, 0),
        R"({"name":"step","ph":"X","ts":1000,"dur":50,"tid":0,"args":{"step":0,"g":1,"rank":0}})" "\n"
        R"({"name":"allreduce","ph":"X","ts":1010,"dur":20,"tid":1,"args":{"step":0,"g":1,"rank":0,"bucket":0}})" "\n"
        R"({"name":"failed step","ph":"X","ts":1051,"dur":20,"tid":0,"args":{"step":1,"g":1,"rank":0}})" "\n"
        R"({"name":"step","ph":"X","ts":1210,"dur":20,"tid":0,"args":{"step":1,"g":2,"rank":0}})" "\n"
        R"({"name":"step","ph":"X","ts":1240,"dur":20,"tid":0,"args":{"step":2,"g":2,"rank":0}})" "\n");
  // Slot 1's first incarnation was killed while writing: its last line is cut short.
  write(rf::apps::trace_part_path(trace, 1, 0),
        R"({"name":"step","ph":"X","ts":1001,"dur":49,"tid":0,"args":{"step":0,"g":1,"rank":1}})" "\n"
        R"({"name":"forward","ph":"X","ts":1060,"du)");
  write(rf::apps::trace_coordinator_part(trace),
        R"({"ts_us":500,"event":"join","cause":"","g":0,"s":-1})" "\n"  // an earlier run's (before since_us)
        R"({"ts_us":1070,"event":"revoke","cause":"connection_closed","g":2,"s":0})" "\n"
        // A failure during the recovery: revoked again, one episode until generation 3 runs.
        R"({"ts_us":1100,"event":"revoke","cause":"failure_report","g":3,"s":0})" "\n"
        R"({"ts_us":1200,"event":"running","cause":"","g":3,"s":0})" "\n");
  const json workers = json::parse(R"([
    {"slot":0,"spawns":[{"incarnation":0,"wall_us":900,"reason":"start"}],
     "exits":[{"incarnation":0,"status":0,"wall_us":1300}]},
    {"slot":1,"spawns":[{"incarnation":0,"wall_us":900,"reason":"start"},
                        {"incarnation":1,"wall_us":1080,"reason":"restart"}],
     "exits":[{"incarnation":0,"status":-9,"wall_us":1075},{"incarnation":1,"status":0,"wall_us":1300}]}])");
  const rf::apps::TraceMergeResult r = rf::apps::merge_trace(
      {.trace_path = trace, .coordinator_log = rf::apps::trace_coordinator_part(trace), .since_us = 800,
       .workers = workers});
  CHECK(r.skipped_lines == 1);
  CHECK(r.missing_parts == 1);  // slot 1 incarnation 1 wrote nothing
  const json doc = json::parse(slurp(trace));
  const json& ev = doc["traceEvents"];
  const int p0 = rf::apps::trace_pid(0), p1 = rf::apps::trace_pid(1);
  REQUIRE(find(ev, "step", p0, rf::apps::trace_tid(0, 0)) != nullptr);
  CHECK((*find(ev, "step", p0, rf::apps::trace_tid(0, 0)))["args"]["slot"] == 0);
  REQUIRE(find(ev, "allreduce", p0, rf::apps::trace_tid(0, 1)) != nullptr);
  CHECK(find(ev, "step", p1, rf::apps::trace_tid(0, 0)) != nullptr);
  CHECK(find(ev, "forward", p1, rf::apps::trace_tid(0, 0)) == nullptr);
  const json* killed = find(ev, "exit", p1, rf::apps::trace_tid(0, 0));
  REQUIRE(killed != nullptr);
  CHECK((*killed)["args"]["status"] == -9);
  CHECK(find(ev, "spawn", p1, rf::apps::trace_tid(1, 0)) != nullptr);
  // The coordinator: this run's events, and the recovery from revoke to running.
  CHECK(find(ev, "join", rf::apps::kCoordinatorPid, 0) == nullptr);
  const json* rec = find(ev, "recovery", rf::apps::kCoordinatorPid, 0);
  REQUIRE(rec != nullptr);
  CHECK((*rec)["ts"] == 1070);
  CHECK((*rec)["dur"] == 130);
  CHECK((*rec)["args"]["g"] == 3);
  CHECK((*rec)["args"]["cause"] == "connection_closed");
  // Step 1 failed in generation 1: its step in generation 2 is the redo; step 2 is new.
  int redo = 0, steps = 0;
  for (const json& e : ev) {
    if (e["ph"] != "X" || e["pid"] != p0 || e["tid"] != 0) continue;
    if (e["name"] == "redo") {
      ++redo;
      CHECK(e["args"]["step"] == 1);
    }
    if (e["name"] == "step") ++steps;
  }
  CHECK(redo == 1);
  CHECK(steps == 2);  // steps 0 and 2
  // Named tracks: metadata first, then the events in time order.
  CHECK(ev[0]["ph"] == "M");
  bool named_bucket = false;
  int64_t last_ts = 0;
  for (const json& e : ev) {
    if (e["ph"] == "M") {
      named_bucket |= e["name"] == "thread_name" && e["args"]["name"] == "incarnation 0 allreduce bucket 0";
      continue;
    }
    CHECK(e["ts"].get<int64_t>() >= last_ts);
    last_ts = e["ts"].get<int64_t>();
  }
  CHECK(named_bucket);

  SUBCASE("the page: tracks and spans with their data attributes, nothing external") {
    const std::string page = (tmp.dir / "t.html").string();
    REQUIRE(rf::apps::write_timeline_html(trace, page) == 0);
    const std::string html = slurp(page);
    const char* killed_track = R"(class="track" data-pid="3" data-tid="0" data-kind="train" data-slot="1")"
                               R"( data-incarnation="0")";
    CHECK(html.find(killed_track) != std::string::npos);
    CHECK(html.find(R"(data-exit-status="-9")") != std::string::npos);
    CHECK(html.find(R"(data-name="allreduce")") != std::string::npos);
    CHECK(html.find(R"(data-bucket="0")") != std::string::npos);
    CHECK(html.find(R"(data-name="recovery")") != std::string::npos);
    CHECK(html.find("<script src") == std::string::npos);
    CHECK(html.find("https://") == std::string::npos);
  }
}

TEST_CASE("timeline --html refuses what is not a trace") {
  TempDir tmp;
  const std::string bad = (tmp.dir / "bad.json").string(), page = (tmp.dir / "p.html").string();
  write(bad, "{\"event\":\"join\"}\n{\"event\":\"leave\"}\n");
  CHECK(rf::apps::write_timeline_html(bad, page) != 0);
  CHECK(rf::apps::write_timeline_html((tmp.dir / "missing.json").string(), page) != 0);
  write(bad, R"({"traceEvents":[]})");
  CHECK(rf::apps::write_timeline_html(bad, page) != 0);
}

TEST_CASE("--trace FILE reaches each worker as its own part in RINGFENCE_TRACE") {
  const rf::elastic::RunOptions o = rf::elastic::parse_run_args({"-n", "2", "--trace", "/tmp/x.json", "--", "prog"});
  CHECK(o.trace == "/tmp/x.json");
  CHECK(rf::apps::coordinator_event_log(o) == "/tmp/x.json.parts/coordinator.jsonl");
  rf::elastic::RunOptions with_log = o;
  with_log.event_log = "/tmp/ev.jsonl";
  CHECK(rf::apps::coordinator_event_log(with_log) == "/tmp/ev.jsonl");
  rf::elastic::WorkerEnv w;
  w.slot = 1;
  w.trace = rf::apps::trace_part_path(o.trace, 1, 2);
  const auto env = rf::elastic::worker_environment(w, nullptr);
  CHECK(env.back() == "RINGFENCE_TRACE=/tmp/x.json.parts/slot1.inc2.jsonl");
  const auto none = rf::elastic::worker_environment({}, nullptr);
  for (const auto& e : none) CHECK(e.rfind("RINGFENCE_TRACE=", 0) != 0);
}
