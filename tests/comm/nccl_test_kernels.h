#pragma once
// Kernels for the NCCL backend's GPU tests (test_nccl_gpu.cpp), each enqueued on `stream`
// (a cudaStream_t). Launch errors throw rf::Error.
#include <cstddef>

namespace rf::comm::test {

// x[i] = base + i, after spinning about `delay_us` on the GPU (a slow producer).
void fill_slow(float* x, size_t n, float base, unsigned delay_us, void* stream);
// Spins until *flag (host-mapped memory) is non-zero: a kernel stuck until the host says.
void spin_until(const volatile int* flag, void* stream);
// y[i] = 2 * x[i] (a consumer).
void twice(const float* x, float* y, size_t n, void* stream);

}  // namespace rf::comm::test
