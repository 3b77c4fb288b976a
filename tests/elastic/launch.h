#pragma once
// Launch — one `ringfence run` under test (needs RF_RINGFENCE): its own temporary directory
// holding the launcher's output (launcher.log), the coordinator's event log (events.jsonl)
// and the summary path a test may pass (summary.json); started as
//   ringfence run FLAGS --event-log LOG --heartbeat 50ms --lease 500ms -- PROGRAM...
// and reaped with a deadline. The directory outlives the process: the launcher is reaped
// first.
#include <doctest/doctest.h>
#include <signal.h>
#include <poll.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/elastic/proc.h"

namespace rf::test {

struct Launch {
  std::string dir, out, log, summary;
  TempDirGuard cleanup;  // destroyed after proc: the launcher is reaped first
  Proc proc;
  explicit Launch(const std::string& name) : dir(temp_dir(name)), cleanup{dir} {
    out = dir + "/launcher.log";
    log = dir + "/events.jsonl";
    summary = dir + "/summary.json";
  }
  void start(const std::vector<std::string>& flags, const std::vector<std::string>& program) {
    std::vector<std::string> argv = {RF_RINGFENCE, "run"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (auto f : {"--event-log", log.c_str(), "--heartbeat", "50ms", "--lease", "500ms", "--"}) argv.push_back(f);
    argv.insert(argv.end(), program.begin(), program.end());
    proc = Proc(argv, {}, out);
  }
  // The same at the launcher's default timing: a fault case as users meet it.
  void start_at_defaults(const std::vector<std::string>& flags, const std::vector<std::string>& program) {
    std::vector<std::string> argv = {RF_RINGFENCE, "run"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    for (auto f : {"--event-log", log.c_str(), "--"}) argv.push_back(f);
    argv.insert(argv.end(), program.begin(), program.end());
    proc = Proc(argv, {}, out);
  }
  int wait(rf::Duration d = std::chrono::seconds(30)) {
    auto st = proc.wait(d);
    REQUIRE_MESSAGE(st.has_value(), "launcher still running; output:\n", slurp(out));
    return *st;
  }
  // Waits until the launcher's output holds `what` (or the launcher ended, or the deadline).
  bool wait_output(const std::string& what, rf::Duration d) {
    const auto deadline = rf::Clock::now() + capped(d);
    while (slurp(out).find(what) == std::string::npos) {
      if (rf::Clock::now() >= deadline || ::kill(proc.pid(), 0) != 0) return slurp(out).find(what) != std::string::npos;
      ::poll(nullptr, 0, 10);
    }
    return true;
  }
  json summary_json() const { return json::parse(slurp(summary), nullptr, false); }
  bool log_exists() const { return std::ifstream(log).good(); }
};

// A summary of a job that ended DONE after worker `slot` exited with `status` once and was
// restarted once, the restart finishing cleanly.
inline void check_restarted_once(const json& s, int slot, int status) {
  REQUIRE(!s.is_discarded());
  CHECK(s["phase"] == "DONE");
  CHECK(s["restarts"] == 1);
  REQUIRE(s["workers"][slot]["exits"].size() == 2);
  CHECK(s["workers"][slot]["exits"][0]["status"] == status);
  CHECK(s["workers"][slot]["exits"][1]["status"] == 0);
}

}  // namespace rf::test
