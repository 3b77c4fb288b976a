#pragma once
// The reference op table: every entry of kernels/op_table.h as its definition, in plain
// loops over host memory (sums in double, the convolution as its 7-deep sum, GEMM as the
// triple loop), with no tiling, no vector code and no scratch. It is slow and obviously
// correct: tests/kernels/oracle_checks checks every other table against it (test_oracle for
// the CPU, test_kernels_cuda on a GPU).
#include "kernels/op_table.h"

namespace rf::kernels {

const OpTable& reference_table();

}  // namespace rf::kernels
