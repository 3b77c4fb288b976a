#pragma once
// The CUDA op table (kernels/op_table.h): every entry enqueues its work on Exec::stream (a
// cudaStream_t) and returns without waiting; pointers are device memory of the stream's
// device, which must be the calling thread's current device. Scratch comes from
// Exec::scratch (the CUDA runtime's caching allocator, core/cuda_runtime.h) and is
// reused in stream order.
//
// Deterministic: no float atomics anywhere. Reductions run in a fixed tree per block and a
// fixed second pass, with launch shapes that depend only on the problem's size, so the
// same inputs give the same bits on every run. GEMM is cuBLAS (blas.h: one handle per
// stream with its own workspace, atomics off, fp32 math without TF32); convolution is
// im2col + cuBLAS over chunks of samples, its input gradient a col2im gather (one thread
// per input element), or direct kernels for a one-channel input (conv.cu). The
// optimizers do the CPU kernels' arithmetic operation for operation, without contraction
// into fused multiply-adds.
// tests/kernels/test_kernels_cuda checks every entry against kernels/reference, and twice
// against itself, on a GPU.
#include "kernels/op_table.h"

namespace rf::kernels {

const OpTable& cuda_table();

}  // namespace rf::kernels
