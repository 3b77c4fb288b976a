// Pooling, log-softmax and NLL on CUDA (ops.h).
#include <cmath>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.h"

namespace rf::kernels::cuda_ops {

namespace {

struct PoolGeo {
  int64_t planes, h, w, k, stride, oh, ow;
};
PoolGeo pool_of(const PoolGeometry& g) { return {g.planes, g.height, g.width, g.kernel, g.stride, g.out_h(), g.out_w()}; }

// One thread per output: the first maximum in scan order; a NaN takes over (PyTorch).
__global__ void max_pool_kernel(PoolGeo g, const float* x, float* out, int32_t* argmax) {
  const int64_t outs = g.oh * g.ow, total = g.planes * outs, plane = g.h * g.w;
  for (int64_t i = thread_index(); i < total; i += grid_step()) {
    const int64_t p = i / outs, o = i % outs, oh = o / g.ow, ow = o % g.ow;
    const float* xp = x + p * plane;
    int64_t best = (oh * g.stride) * g.w + ow * g.stride;
    for (int64_t kh = 0; kh < g.k; ++kh)
      for (int64_t kw = 0; kw < g.k; ++kw) {
        const int64_t j = (oh * g.stride + kh) * g.w + ow * g.stride + kw;
        const float v = xp[j];
        if (v > xp[best] || isnan(v)) best = j;
      }
    out[i] = xp[best];
    argmax[i] = static_cast<int32_t>(best);
  }
}

// One thread per input element: the outputs whose window holds it, in output order, add
// their gradient when they chose it (a gather: no atomics, the reference's order).
__global__ void max_pool_backward_kernel(PoolGeo g, const float* dout, const int32_t* argmax, float* dx, bool acc) {
  const int64_t plane = g.h * g.w, outs = g.oh * g.ow, total = g.planes * plane;
  for (int64_t i = thread_index(); i < total; i += grid_step()) {
    const int64_t p = i / plane, j = i % plane, h = j / g.w, w = j % g.w;
    // Outputs oh with oh*s <= h < oh*s + k.
    const int64_t oh_lo = h < g.k ? 0 : (h - g.k) / g.stride + 1, oh_hi = h / g.stride;
    const int64_t ow_lo = w < g.k ? 0 : (w - g.k) / g.stride + 1, ow_hi = w / g.stride;
    float s = acc ? dx[i] : 0.0f;
    for (int64_t oh = oh_lo; oh <= oh_hi && oh < g.oh; ++oh)
      for (int64_t ow = ow_lo; ow <= ow_hi && ow < g.ow; ++ow) {
        const int64_t o = p * outs + oh * g.ow + ow;
        if (argmax[o] == j) s += dout[o];
      }
    dx[i] = s;
  }
}

// One block per row: the row's maximum, then sum exp(x - max) in double, both in fixed trees.
__global__ void log_softmax_kernel(int64_t cols, const float* x, float* y) {
  __shared__ double shared[kBlock];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  double m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += kBlock) m = fmax(m, static_cast<double>(xr[c]));
  m = block_max(m, shared);
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += kBlock) s += exp(static_cast<double>(xr[c]) - m);
  s = block_sum(s, shared);
  const double lse = m + log(s);
  for (int64_t c = threadIdx.x; c < cols; c += kBlock) yr[c] = static_cast<float>(static_cast<double>(xr[c]) - lse);
}

// dx = g - exp(y) * sum(g), one block per row.
__global__ void log_softmax_backward_kernel(int64_t cols, const float* y, const float* g, float* dx, bool acc) {
  __shared__ double shared[kBlock];
  const int64_t off = blockIdx.x * cols;
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += kBlock) s += g[off + c];
  s = block_sum(s, shared);
  for (int64_t c = threadIdx.x; c < cols; c += kBlock) {
    const double d = static_cast<double>(g[off + c]) - exp(static_cast<double>(y[off + c])) * s;
    dx[off + c] = static_cast<float>(acc ? d + static_cast<double>(dx[off + c]) : d);
  }
}

struct LoadPicked {  // -logp[r, labels[r]]
  const float* logp;
  const int32_t* labels;
  int64_t cols;
  __device__ double operator()(int64_t r) const { return -static_cast<double>(logp[r * cols + labels[r]]); }
};

// One thread per row: the rows' labelled entries are distinct elements.
__global__ void nll_backward_kernel(int64_t rows, int64_t cols, const int32_t* labels, const float* g, double divisor,
                                    float* dlogp) {
  const double d = static_cast<double>(g[0]) / divisor;
  for (int64_t r = thread_index(); r < rows; r += grid_step()) {
    float& o = dlogp[r * cols + labels[r]];
    o = static_cast<float>(static_cast<double>(o) - d);
  }
}

}  // namespace

void max_pool2d_forward(const Exec& e, const PoolGeometry& pg, const float* x, float* out, int32_t* argmax) {
  const PoolGeo g = pool_of(pg);
  const int64_t total = g.planes * g.oh * g.ow;
  if (total <= 0) return;
  max_pool_kernel<<<grid_for(total), kBlock, 0, stream_of(e)>>>(g, x, out, argmax);
  RF_CUDA_CHECK_LAUNCH();
}
void max_pool2d_backward(const Exec& e, const PoolGeometry& pg, const float* g, const int32_t* argmax, float* dx,
                         bool acc) {
  const PoolGeo q = pool_of(pg);
  const int64_t total = q.planes * q.h * q.w;
  if (total <= 0) return;
  max_pool_backward_kernel<<<grid_for(total), kBlock, 0, stream_of(e)>>>(q, g, argmax, dx, acc);
  RF_CUDA_CHECK_LAUNCH();
}
void log_softmax_forward(const Exec& e, int64_t rows, int64_t cols, const float* x, float* y) {
  if (rows <= 0 || cols <= 0) return;
  log_softmax_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream_of(e)>>>(cols, x, y);
  RF_CUDA_CHECK_LAUNCH();
}
void log_softmax_backward(const Exec& e, int64_t rows, int64_t cols, const float* y, const float* g, float* dx,
                          bool acc) {
  if (rows <= 0 || cols <= 0) return;
  log_softmax_backward_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream_of(e)>>>(cols, y, g, dx, acc);
  RF_CUDA_CHECK_LAUNCH();
}
void nll_forward(const Exec& e, int64_t rows, int64_t cols, const float* logp, const int32_t* labels, bool mean,
                 float* out) {
  sum_to_scalar(e, rows, LoadPicked{logp, labels, cols}, mean ? static_cast<double>(rows) : 1.0, out);
}
void nll_backward(const Exec& e, int64_t rows, int64_t cols, const int32_t* labels, const float* g, bool mean,
                  float* dlogp) {
  if (rows <= 0) return;
  nll_backward_kernel<<<grid_for(rows), kBlock, 0, stream_of(e)>>>(rows, cols, labels, g,
                                                                   mean ? static_cast<double>(rows) : 1.0, dlogp);
  RF_CUDA_CHECK_LAUNCH();
}

}  // namespace rf::kernels::cuda_ops
