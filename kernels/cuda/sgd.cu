#include "kernels/cuda/check.h"
#include "kernels/cuda/sgd.h"

namespace rf::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

__global__ void sgd_step_kernel(float* param, const float* grad, float* buf, size_t n, SgdParams p) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float g = grad[i] + p.weight_decay * param[i];
  if (p.momentum != 0.0f) {
    float b = p.first_step ? g : p.momentum * buf[i] + (1.0f - p.dampening) * g;
    buf[i] = b;
    g = p.nesterov ? g + p.momentum * b : b;
  }
  param[i] -= p.lr * g;
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------

void sgd_step(float* param, const float* grad, float* momentum_buf, size_t n, const SgdParams& p,
              cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kBlock = 256;
  const unsigned grid = static_cast<unsigned>((n + kBlock - 1) / kBlock);
  sgd_step_kernel<<<grid, kBlock, 0, stream>>>(param, grad, momentum_buf, n, p);
  RF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace rf::cuda
