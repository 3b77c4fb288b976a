#pragma once
// A deterministic sum of n loaded values to one float, in double: pass 1 runs a grid whose
// size depends only on n, each block summing its grid-stride elements in a fixed order and
// a fixed tree into one partial; pass 2, one block, sums the partials in a fixed tree and
// writes float(total / divisor). No atomics: the same inputs give the same bits. Included
// only by .cu files.
#include "kernels/cuda/launch.h"

namespace rf::kernels::cuda_ops {

constexpr int64_t kReduceMaxBlocks = 1024;

template <typename Load>
__global__ void partial_sums_kernel(int64_t n, Load load, double* partial) {
  __shared__ double shared[kBlock];
  double acc = 0.0;
  for (int64_t i = thread_index(); i < n; i += grid_step()) acc += load(i);
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// One block: each thread sums its partials in order, then the fixed tree.
template <typename T = double>
__global__ void final_sum_kernel(int64_t parts, const T* partial, T divisor, float* out) {
  __shared__ T shared[kBlock];
  T acc = 0;
  for (int64_t i = threadIdx.x; i < parts; i += kBlock) acc += partial[i];
  const T total = block_sum(acc, shared);
  if (threadIdx.x == 0) out[0] = static_cast<float>(total / divisor);
}

template <typename Load>
void sum_to_scalar(const Exec& e, int64_t n, Load load, double divisor, float* out) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
  if (blocks < 1) blocks = 1;
  if (blocks > kReduceMaxBlocks) blocks = kReduceMaxBlocks;
  ScratchBlock partial(*e.scratch, sizeof(double) * static_cast<size_t>(blocks));
  cudaStream_t s = stream_of(e);
  partial_sums_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, s>>>(n, load, partial.get<double>());
  RF_CUDA_CHECK_LAUNCH();
  final_sum_kernel<<<1, kBlock, 0, s>>>(blocks, partial.get<double>(), divisor, out);
  RF_CUDA_CHECK_LAUNCH();
}

}  // namespace rf::kernels::cuda_ops
