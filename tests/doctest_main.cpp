// The one doctest main every unit-test executable links (rf_test_main). A run in which a
// case skipped (tests/skip.h) and none failed exits 77: ctest's SKIP_RETURN_CODE.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>

#include "tests/skip.h"

namespace rf::test {
namespace {
std::atomic<int> skips{0};
}  // namespace

void skip(std::string_view reason) {
  skips.fetch_add(1);
  std::printf("SKIPPED: %.*s\n", static_cast<int>(reason.size()), reason.data());
  std::fflush(stdout);
}

int skipped_count() { return skips.load(); }

}  // namespace rf::test

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit()) return rc;
  if (rc == 0 && rf::test::skipped_count() > 0) return 77;
  return rc;
}
