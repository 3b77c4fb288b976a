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
