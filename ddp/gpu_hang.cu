#include "ddp/gpu_hang.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace rf::ddp {
namespace {

// Never set: spin_until_exit waits for it for good.
__device__ int g_release = 0;

__global__ void spin_until_exit() {
  // A volatile load every 1 ms: the loop cannot be hoisted. Without MPS the GPU time-slices
  // between the contexts of the processes sharing it, so their kernels go on in their own
  // slices however this one loops (slower, by its share); the nap only makes its slices cheap.
  while (*static_cast<volatile int*>(&g_release) == 0) __nanosleep(1000000);
}

}  // namespace

void hang_gpu_stream(int device, void* stream) {
  int now = -1;
  RF_CUDA_CHECK(cudaGetDevice(&now));
  if (now != device) RF_CUDA_CHECK(cudaSetDevice(device));
  spin_until_exit<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>();
  RF_CUDA_CHECK_LAUNCH();
}

}  // namespace rf::ddp
