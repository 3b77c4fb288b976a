#pragma once
// The oracle's checks over a whole table (oracle_checks.cpp), shared by the CPU's test
// (test_oracle.cpp) and the GPU's (test_cuda.cpp). With TableUnderTest::twice the same
// calls check determinism instead: each entry twice, bit for bit.
#include <cstdint>

#include "tests/kernels/oracle_case.h"

namespace rf::kernels::oracle {

// Every entry of t.table on inputs drawn from `seed`; fails unless all kOpTableEntries
// entries were checked.
void check_every_entry(const TableUnderTest& t, uint64_t seed);

// oracle_seed(), printed with how to replay it.
uint64_t announce_seed(const char* what);

}  // namespace rf::kernels::oracle
