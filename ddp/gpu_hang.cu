#include "ddp/gpu_hang.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace rf::ddp {
namespace {

// Never set: spin_until_exit waits for it for good.
__device__ int g_release = 0;

__global__ void spin_until_exit() {
  // A volatile load every 1 ms: the loop cannot be hoisted, and the nap leaves the SM's
  // issue slots to the kernels of other processes sharing the GPU.
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
