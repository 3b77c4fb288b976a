#pragma once
// A unit test that cannot run here (no AVX-512 kernels, no schedstat) says so instead of
// passing: rf::test::skip("why") prints "SKIPPED: why" and the test case returns; the
// executable then exits 77, which ctest reports as skipped (SKIP_RETURN_CODE), never as
// passed. Such cases get their own ctest entry (rf_unit_test's SKIPPABLE), so a skip never
// hides the other cases of the executable.
//
//   if (!conv_direct_fits(g)) return rf::test::skip("conv_direct is not built here (no AVX-512)");
#include <string_view>

namespace rf::test {

void skip(std::string_view reason);
int skipped_count();

}  // namespace rf::test
