// The launcher's end-of-job lines (apps/ringfence/status_line.cpp): what a recovery line
// says about where a whole-job restart's state came from.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/ringfence/status_line.h"

using nlohmann::json;

namespace {

// What StatusLine::finish writes to stderr for this summary.
std::string finish_text(const json& summary) {
  std::fflush(stderr);
  std::FILE* tmp = std::tmpfile();
  REQUIRE(tmp != nullptr);
  const int saved = ::dup(2);
  REQUIRE(saved >= 0);
  ::dup2(::fileno(tmp), 2);
  rf::apps::StatusLine(false).finish(summary);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string out;
  std::rewind(tmp);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) out.append(buf, n);
  std::fclose(tmp);
  return out;
}

json recovery(bool finished, int64_t target_step) {
  return {{"cause", "connection_closed"}, {"worker", {{"slot", 0}, {"incarnation", 0}}}, {"planned", false},
          {"generation", finished ? json(3) : json(nullptr)}, {"whole_job_restart", true},
          {"target_step", target_step}, {"world", 2}, {"finished", finished},
          {"total_ms", finished ? json(12.5) : json(nullptr)},
          {"phases", {{"detect", 1.0}, {"agree", nullptr}, {"connect", nullptr}, {"transfer", nullptr},
                      {"verify", nullptr}}}};
}

json summary_of(const json& rec) {
  return {{"phase", "STOPPED"}, {"exit_status", 1}, {"generations", 3}, {"restarts", 2}, {"wall_s", 1.0},
          {"error", ""}, {"recoveries", json::array({rec})}};
}

}  // namespace

TEST_CASE("a whole-job restart's line says where its state came from, only once it is known") {
  CHECK(finish_text(summary_of(recovery(true, 40))).find(", restored from disk: no worker held state") !=
        std::string::npos);
  CHECK(finish_text(summary_of(recovery(true, -1))).find(", started again at step 0: no worker held state, none on disk") !=
        std::string::npos);
  // A whole-job restart that never ran again (the job ended during its rounds): T was never
  // set, so nothing is known of the disk, and it did not start again.
  const std::string unfinished = finish_text(summary_of(recovery(false, -1)));
  CHECK(unfinished.find("none on disk") == std::string::npos);
  CHECK(unfinished.find("started again") == std::string::npos);
  CHECK(unfinished.find(", whole-job restart, unfinished") != std::string::npos);
}

TEST_CASE("the live line shows the loss and the throughput when a member reported them") {
  json st = {{"generation", 2}, {"phase", "RUNNING"}, {"world", 4}, {"target_world", 4}, {"standby", json::array()},
             {"step", 150}, {"recoveries", 1}, {"loss", 0.43217}, {"samples_per_s", 5230.4}};
  CHECK(rf::apps::live_line(st, 1) ==
        "ringfence: g 2 RUNNING | members 4/4 | step 150 | loss 0.4322 | 5230 samples/s | recoveries 1 | restarts 1");
  st["loss"] = nullptr;  // nothing reported yet (before the first step)
  st["samples_per_s"] = nullptr;
  CHECK(rf::apps::live_line(st, 0) == "ringfence: g 2 RUNNING | members 4/4 | step 150 | recoveries 1 | restarts 0");
  st.erase("loss");
  CHECK(rf::apps::live_line(st, 0).find("loss") == std::string::npos);
}

TEST_CASE("failed checkpoints show on the live line and at the end, with the last error") {
  json st = {{"generation", 1}, {"phase", "RUNNING"}, {"world", 2}, {"target_world", 2}, {"standby", json::array()},
             {"step", 250}, {"recoveries", 0}, {"checkpoints_failed", 0}};
  CHECK(rf::apps::live_line(st, 0).find("ckpt") == std::string::npos);
  st["checkpoints_failed"] = 2;
  CHECK(rf::apps::live_line(st, 0) ==
        "ringfence: g 1 RUNNING | members 2/2 | step 250 | recoveries 0 | restarts 0 | ckpt failed 2");
  json s = {{"phase", "DONE"}, {"exit_status", 0}, {"generations", 1}, {"restarts", 0}, {"wall_s", 1.0}, {"error", ""},
            {"recoveries", json::array()}, {"checkpoints_failed", 2},
            {"checkpoint_error", "/c/.ckpt-000000199.safetensors.tmp: write failed: No space left on device"}};
  CHECK(finish_text(s).find("ringfence: 2 checkpoint(s) could not be written (training went on); the last: "
                            "/c/.ckpt-000000199.safetensors.tmp: write failed: No space left on device\n") !=
        std::string::npos);
  s["checkpoints_failed"] = 0;
  CHECK(finish_text(s).find("checkpoint") == std::string::npos);
}
