#pragma once
// The CPU's op table (kernels/op_table.h): every entry runs on the host and is done when
// it returns (Exec::stream is null). The choices the CPU makes live inside its entries:
// conv2d takes the direct route (conv_direct.h) where conv_direct_fits says so and im2col
// + GEMM otherwise, one sample at a time; matmul goes through gemm() (gemm.h), which picks
// its kernel by shape. Scratch comes from Exec::scratch (core's caching allocator).
#include "kernels/op_table.h"

namespace rf::kernels {

const OpTable& cpu_table();

}  // namespace rf::kernels
