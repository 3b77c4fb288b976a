// comm_mp_test — multi-process tests of the UCX communicator on loopback: real processes
// (not threads), started and reaped by run_local_ranks (comm/bootstrap/local_launcher.h) with a
// deadline, a FileStore in a fresh temporary directory.
//
//   comm_mp_test <scenario> <W>           the launcher: starts W ranks, checks how each ended
//   (ranks run the same binary with RF_RANK/RF_WORLD/RF_STORE set)
//
// Scenarios: allreduce, large, collectives, blob_size, abort, abort_failed, kill, stall, fence, drop,
// destroy, sc_abort, sc_release, sc_cap, sc_cap_async, regen, zc_refd(_same), slot_mismatch, tag_mismatch; `_reg`, `_halfreg`, `_noshm` select
// registered buffers (zero-copy), all but rank 0 registered, the shared-memory path off;
// `<scenario>_fifo` runs one with the
// single-copy path off, `<scenario>_mixed` with it off on rank 0 only.
// A rank reports a failed check on stderr and exits 1; the launcher fails if any rank
// ended other than expected (only `kill`'s victim is expected to die by SIGKILL).
//
// The scenarios live by concern in tests/comm/mp/ (collectives, faults, single_copy,
// shared_memory), each file with its table of names; what they share is in
// tests/comm/mp/mp_support.h.
#include <sys/wait.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "tests/comm/mp/mp_support.h"

namespace {

using namespace rf::comm;
using namespace rf::comm::mptest;

int run_rank(const std::string& scenario) {
  std::vector<NamedScenario> all;
  for (auto group : {collective_scenarios, fault_scenarios, single_copy_scenarios, shared_memory_scenarios})
    for (const NamedScenario& s : group()) all.push_back(s);
  return rf::comm::testing::run_scenario(scenario, all);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: comm_mp_test <scenario> <W>\n";
    return 2;
  }
  std::string scenario = argv[1];
  // Suffixes select a variant (see the helpers above); the ranks strip them too.
  static const std::pair<const char*, const char*> kSuffixes[] = {
      {"_fifo", "RF_TEST_FIFO"}, {"_mixed", "RF_TEST_MIXED"}, {"_halfreg", "RF_TEST_HALFREG"},
      {"_reg", "RF_TEST_REG"}, {"_noshm", "RF_TEST_NOSHM"}};
  std::vector<const char*> variant_env;
  for (const auto& [suffix, env] : kSuffixes) {
    const std::string x = suffix;
    if (scenario.size() > x.size() && scenario.compare(scenario.size() - x.size(), x.size(), x) == 0) {
      scenario.resize(scenario.size() - x.size());
      variant_env.push_back(env);
    }
  }
  if (std::getenv("RF_RANK")) return run_rank(scenario);
  LocalLaunch l;
  l.program = "/proc/self/exe";
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    l.program = self;
  }
  l.args = {argv[1], argv[2]};  // the ranks strip the suffix themselves
  l.world = std::atoi(argv[2]);
  l.deadline = std::chrono::seconds(scenario == "large" ? 150 : 60);
  // Strays of the fence test and leftovers of aborted collectives are expected; UCX's
  // warnings about them would only bury the report.
  for (const char* env : variant_env) l.env.push_back({env, "1"});
  if (!std::getenv("UCX_LOG_LEVEL")) l.env.push_back({"UCX_LOG_LEVEL", "error"});
  // UCX's own fatal-signal handlers (backtraces, "freeze") must not get in the way of a
  // rank that the test kills or that crashes: the launcher reports how each rank ended.
  if (!std::getenv("UCX_HANDLE_ERRORS")) l.env.push_back({"UCX_HANDLE_ERRORS", "none"});
  const TimePoint t = rf::Clock::now();
  int rc = 0;
  for (const RankExit& x : run_local_ranks(l)) {
    const bool victim = scenario == "kill" && x.rank == l.world / 2;
    const bool expected = victim ? (WIFSIGNALED(x.status) && WTERMSIG(x.status) == SIGKILL && !x.killed_at_deadline) : x.ok();
    if (!expected) rc = 1;
    std::cerr << (expected ? "  ok   " : "  FAIL ") << x.describe() << "\n";
  }
  std::cerr << "comm_mp_test " << scenario << " W=" << l.world << ": " << (rc ? "FAILED" : "passed") << " in "
            << elapsed_ms(t) / 1000 << " s\n";
  return rc;
}
