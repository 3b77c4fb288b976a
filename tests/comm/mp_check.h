#pragma once
// The check of comm's multi-process tests: a child (one rank, under comm's local launcher)
// counts failed checks instead of stopping at the first, prints each with its rank, and
// exits non-zero when any failed (main returns g_failures != 0).
#include <iostream>

#include "base/str.h"

namespace rf::comm::testing {
inline int g_failures = 0;
inline int g_rank = -1;  // set once the child knows its rank
}  // namespace rf::comm::testing

#define EXPECT(cond, ...)                                                                                   \
  do {                                                                                                      \
    if (!(cond)) {                                                                                          \
      ++::rf::comm::testing::g_failures;                                                                    \
      std::cerr << "rank " << ::rf::comm::testing::g_rank << ": " << __FILE__ << ":" << __LINE__            \
                << ": check failed: " #cond << " " << rf::str(__VA_ARGS__) << std::endl;                     \
    }                                                                                                       \
  } while (0)

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/bootstrap/local_launcher.h"

namespace rf::comm::testing {

// A scenario every rank runs: 0 when all its checks held.
struct NamedScenario {
  const char* name;
  int (*run)();
};

// Runs the named scenario of the table on this rank: its result, 1 on an unexpected
// exception (printed with the rank), 2 for a name the table does not hold.
inline int run_scenario(const std::string& name, const std::vector<NamedScenario>& table) {
  try {
    for (const NamedScenario& s : table)
      if (name == s.name) return s.run();
    std::cerr << "unknown scenario " << name << "\n";
    return 2;
  } catch (const std::exception& err) {
    std::cerr << "rank " << g_rank << ": unexpected error: " << err.what() << "\n";
    return 1;
  }
}

// A launch of this very program as `world` ranks with `args`, UCX's warnings and signal
// handlers out of the way (leftovers of failed collectives are expected; the launcher
// gives the account of how each rank ended).
inline LocalLaunch self_launch(std::vector<std::string> args, int world, std::chrono::seconds deadline) {
  LocalLaunch l;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  l.program = n > 0 ? std::string(self, static_cast<size_t>(n)) : "/proc/self/exe";
  l.args = std::move(args);
  l.world = world;
  l.deadline = deadline;
  if (!std::getenv("UCX_LOG_LEVEL")) l.env.push_back({"UCX_LOG_LEVEL", "error"});
  if (!std::getenv("UCX_HANDLE_ERRORS")) l.env.push_back({"UCX_HANDLE_ERRORS", "none"});
  return l;
}

// Runs it and prints one line per rank (`who(rank)` names it); 0 when every rank exited 0.
template <typename Who>
int run_and_report(const LocalLaunch& l, Who who) {
  int rc = 0;
  for (const RankExit& x : run_local_ranks(l)) {
    if (!x.ok()) rc = 1;
    std::cerr << (x.ok() ? "  ok   " : "  FAIL ") << who(x.rank) << x.describe() << "\n";
  }
  return rc;
}

}  // namespace rf::comm::testing
