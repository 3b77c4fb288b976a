#pragma once
// What the .cu files of kernels/cuda share: the stream of an Exec, launch shapes that
// depend only on the problem size, and the deterministic block reduction (a fixed tree over
// shared memory; never atomics). Included only by .cu files.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/exec.h"

namespace rf::kernels::cuda_ops {

constexpr int kBlock = 256;         // threads per block everywhere (a power of two)
constexpr int64_t kMaxGrid = 8192;  // grid-stride loops beyond this many blocks

inline cudaStream_t stream_of(const Exec& e) { return static_cast<cudaStream_t>(e.stream); }

// Blocks for an elementwise pass over n elements (grid-stride past kMaxGrid blocks).
inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxGrid ? kMaxGrid : b));
}

// The grid-stride loop's index and step.
__device__ inline int64_t thread_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t grid_step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// Sum of one value per thread of a kBlock-thread block, in a fixed tree; every thread gets
// the total. `shared` holds kBlock values.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] = shared[threadIdx.x] + shared[threadIdx.x + s];
    __syncthreads();
  }
  const T total = shared[0];
  __syncthreads();  // shared may be reused right after
  return total;
}

template <typename T>
__device__ T block_max(T v, T* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      const T o = shared[threadIdx.x + s];
      if (o > shared[threadIdx.x]) shared[threadIdx.x] = o;
    }
    __syncthreads();
  }
  const T total = shared[0];
  __syncthreads();
  return total;
}

}  // namespace rf::kernels::cuda_ops
