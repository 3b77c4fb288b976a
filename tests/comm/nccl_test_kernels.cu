#include "tests/comm/nccl_test_kernels.h"

#include <cuda_runtime.h>

#include <string>

#include "base/error.h"

namespace rf::comm::test {

namespace {

__global__ void fill_slow_kernel(float* x, size_t n, float base, long long delay_cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < delay_cycles) {
  }
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[i] = base + static_cast<float>(i);
}

__global__ void spin_kernel(const volatile int* flag) {
  while (*flag == 0) {
  }
}

__global__ void twice_kernel(const float* x, float* y, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = 2.0f * x[i];
}

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw rf::Error(std::string(what) + ": " + cudaGetErrorString(e));
}

unsigned blocks_for(size_t n) { return static_cast<unsigned>((n + 255) / 256 > 1024 ? 1024 : (n + 255) / 256); }

}  // namespace

void fill_slow(float* x, size_t n, float base, unsigned delay_us, void* stream) {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  const long long cycles = static_cast<long long>(khz) * delay_us / 1000;
  fill_slow_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, n, base, cycles);
  check_launch("fill_slow");
}

void spin_until(const volatile int* flag, void* stream) {
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(flag);
  check_launch("spin_until");
}

void twice(const float* x, float* y, size_t n, void* stream) {
  twice_kernel<<<blocks_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
  check_launch("twice");
}

}  // namespace rf::comm::test
