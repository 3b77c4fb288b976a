// The CPU table against the reference table (kernels/reference), entry by entry
// (oracle_checks.h), and the determinism harness on it: each entry twice, bit for bit.
// The CUDA table's checks are test_cuda.cpp's (label gpu).
//
// The seed is printed; RINGFENCE_ORACLE_SEED=<seed> replays a run.
#include <doctest/doctest.h>

#include "kernels/cpu/table.h"
#include "tests/kernels/oracle_checks.h"

namespace {

using namespace rf::kernels;
using namespace rf::kernels::oracle;

}  // namespace

TEST_CASE("every entry of the cpu op table matches the reference on random inputs") {
  const uint64_t seed = announce_seed("op-table oracle (cpu)");
  HostMemory host;
  check_every_entry({&cpu_table(), &host}, seed);
}

TEST_CASE("every entry of the cpu op table, run twice on the same inputs, gives the same bits") {
  const uint64_t seed = announce_seed("op-table determinism (cpu)");
  HostMemory host;
  check_every_entry({&cpu_table(), &host, /*twice=*/true}, seed);
}
