// The CUDA table's memory, elementwise, reduction, bias and optimizer entries (ops.h).
#include <cmath>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.h"

namespace rf::kernels::cuda_ops {

namespace {

// ---- kernels ---------------------------------------------------------------------------

__global__ void fill_kernel(int64_t n, float value, float* out) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) out[i] = value;
}
__global__ void accumulate_kernel(int64_t n, const float* g, float* dx) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) dx[i] = dx[i] + g[i];
}
__global__ void divide_by_kernel(int64_t n, const float* divisor, float* x) {
  const float d = divisor[0];
  for (int64_t i = thread_index(); i < n; i += grid_step()) x[i] = x[i] / d;
}
__global__ void add_kernel(int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) out[i] = a[i] + b[i];
}
__global__ void mul_kernel(int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) out[i] = a[i] * b[i];
}
__global__ void mul_backward_kernel(int64_t n, const float* a, const float* b, const float* g, float* da,
                                    float* db) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) {
    if (da) da[i] = da[i] + g[i] * b[i];
    if (db) db[i] = db[i] + g[i] * a[i];
  }
}
__global__ void add_scalar_kernel(int64_t n, const float* g, float* dx) {
  const float v = g[0];
  for (int64_t i = thread_index(); i < n; i += grid_step()) dx[i] = dx[i] + v;
}
__global__ void relu_kernel(int64_t n, const float* x, float* out) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
__global__ void relu_backward_kernel(int64_t n, const float* out, const float* g, float* dx, bool acc) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) {
    const float d = out[i] > 0.0f ? g[i] : 0.0f;
    dx[i] = acc ? dx[i] + d : d;
  }
}

// out[(r * cols + c) * plane + p] = x[...] + bias[c]
__global__ void bias_kernel(int64_t n, int64_t cols, int64_t plane, const float* x, const float* bias, float* out) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) out[i] = x[i] + bias[(i / plane) % cols];
}
// One block per column c: its rows * plane elements in a fixed order per thread, then the
// block's fixed tree; dbias[c] += the sum (accumulated in double, rounded once). For a
// linear layer's bias (plane 1, few rows per column).
__global__ void bias_backward_kernel(int64_t rows, int64_t cols, int64_t plane, const float* g, float* dbias) {
  __shared__ double shared[kBlock];
  const int64_t c = blockIdx.x, per = rows * plane;
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < per; j += kBlock) {
    const int64_t r = j / plane, p = j % plane;
    acc += g[(r * cols + c) * plane + p];
  }
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) dbias[c] = static_cast<float>(total + static_cast<double>(dbias[c]));
}
// A convolution's bias (a plane per channel, rows x plane values per column: 800 000 for the
// CNN's first layer at batch 1024, too many for one block). Block (s, c) sums the rows
// [s * rows / S, (s + 1) * rows / S) of column c, coalesced along the plane, into
// partial[c * S + s]; bias_partials_kernel adds each column's S partials in order.
__global__ void bias_backward_split_kernel(int64_t rows, int64_t cols, int64_t plane, int64_t splits,
                                           const float* g, double* partial) {
  __shared__ double shared[kBlock];
  const int64_t s = blockIdx.x, c = blockIdx.y;
  const int64_t r0 = s * rows / splits, r1 = (s + 1) * rows / splits;
  double acc = 0.0;
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = g + (r * cols + c) * plane;
    for (int64_t p = threadIdx.x; p < plane; p += kBlock) acc += row[p];
  }
  const double total = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[c * splits + s] = total;
}
__global__ void bias_partials_kernel(int64_t cols, int64_t splits, const double* partial, float* dbias) {
  for (int64_t c = thread_index(); c < cols; c += grid_step()) {
    double total = 0.0;
    for (int64_t s = 0; s < splits; ++s) total += partial[c * splits + s];
    dbias[c] = static_cast<float>(total + static_cast<double>(dbias[c]));
  }
}

// The CPU's SGD (kernels/cpu/optim.cpp) operation for operation; __fmul_rn/__fadd_rn keep
// nvcc from fusing them, so the bits are the CPU's.
__global__ void sgd_kernel(int64_t n, float neg_lr, float keep, float wd, float mom, bool decay, bool momentum,
                           bool first, bool nesterov, float* param, const float* grad, float* buf) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) {
    float d = grad[i];
    if (decay) d = __fadd_rn(d, __fmul_rn(wd, param[i]));
    if (momentum) {
      const float b = first ? d : __fadd_rn(__fmul_rn(mom, buf[i]), __fmul_rn(keep, d));
      buf[i] = b;
      d = nesterov ? __fadd_rn(d, __fmul_rn(mom, b)) : b;
    }
    param[i] = __fadd_rn(param[i], __fmul_rn(neg_lr, d));
  }
}

struct AdamScalars {
  float beta1, beta2, eps, decay, neg_step_size, bc2_sqrt, one_minus_b1, one_minus_b2;
};
// The CPU's AdamW operation for operation (IEEE division and square root, no fusing).
__global__ void adamw_kernel(int64_t n, AdamScalars s, float* param, const float* grad, float* m, float* v) {
  for (int64_t i = thread_index(); i < n; i += grid_step()) {
    const float g = grad[i];
    const float p = __fmul_rn(param[i], s.decay);
    const float mi = __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.one_minus_b1, g));
    const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2), __fmul_rn(__fmul_rn(s.one_minus_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    param[i] = __fadd_rn(p, __fmul_rn(s.neg_step_size, __fdiv_rn(mi, denom)));
  }
}

struct LoadFloat {
  const float* x;
  __device__ double operator()(int64_t i) const { return x[i]; }
};

}  // namespace

// ---- launchers -------------------------------------------------------------------------

void fill(const Exec& e, int64_t n, float value, float* out) {
  if (n <= 0) return;
  fill_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, value, out);
  RF_CUDA_CHECK_LAUNCH();
}
void copy(const Exec& e, int64_t n, const float* x, float* y) {
  if (n <= 0) return;
  RF_CUDA_CHECK(cudaMemcpyAsync(y, x, sizeof(float) * static_cast<size_t>(n), cudaMemcpyDeviceToDevice, stream_of(e)));
}
void copy_i32(const Exec& e, int64_t n, const int32_t* x, int32_t* y) {
  if (n <= 0) return;
  RF_CUDA_CHECK(
      cudaMemcpyAsync(y, x, sizeof(int32_t) * static_cast<size_t>(n), cudaMemcpyDeviceToDevice, stream_of(e)));
}
void accumulate(const Exec& e, int64_t n, const float* g, float* dx, bool acc) {
  if (n <= 0) return;
  if (!acc) return copy(e, n, g, dx);
  accumulate_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, g, dx);
  RF_CUDA_CHECK_LAUNCH();
}
void divide_by(const Exec& e, int64_t n, const float* divisor, float* x) {
  if (n <= 0) return;
  divide_by_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, divisor, x);
  RF_CUDA_CHECK_LAUNCH();
}
void add_forward(const Exec& e, int64_t n, const float* a, const float* b, float* out) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, a, b, out);
  RF_CUDA_CHECK_LAUNCH();
}
void mul_forward(const Exec& e, int64_t n, const float* a, const float* b, float* out) {
  if (n <= 0) return;
  mul_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, a, b, out);
  RF_CUDA_CHECK_LAUNCH();
}
void mul_backward(const Exec& e, int64_t n, const float* a, const float* b, const float* g, float* da, float* db) {
  if (n <= 0 || (!da && !db)) return;
  mul_backward_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, a, b, g, da, db);
  RF_CUDA_CHECK_LAUNCH();
}
void sum_forward(const Exec& e, int64_t n, const float* x, float* out) {
  sum_to_scalar(e, n, LoadFloat{x}, 1.0, out);
}
void sum_backward(const Exec& e, int64_t n, const float* g, float* dx) {
  if (n <= 0) return;
  add_scalar_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, g, dx);
  RF_CUDA_CHECK_LAUNCH();
}
void bias_forward(const Exec& e, const BiasShape& s, const float* x, const float* bias, float* out) {
  const int64_t n = s.rows * s.cols * s.plane;
  if (n <= 0) return;
  bias_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, s.cols, s.plane, x, bias, out);
  RF_CUDA_CHECK_LAUNCH();
}
void bias_backward(const Exec& e, const BiasShape& s, const float* g, float* dbias) {
  if (s.cols <= 0) return;
  // About 8 blocks per SM of an H200 (132 SMs) over all columns, at most one per row.
  int64_t splits = s.plane > 1 ? (1056 + s.cols - 1) / s.cols : 1;
  if (splits > s.rows) splits = s.rows;
  if (splits <= 1) {
    bias_backward_kernel<<<static_cast<unsigned>(s.cols), kBlock, 0, stream_of(e)>>>(s.rows, s.cols, s.plane, g,
                                                                                     dbias);
    RF_CUDA_CHECK_LAUNCH();
    return;
  }
  ScratchBlock partial(*e.scratch, sizeof(double) * static_cast<size_t>(splits * s.cols));
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(s.cols));
  bias_backward_split_kernel<<<grid, kBlock, 0, stream_of(e)>>>(s.rows, s.cols, s.plane, splits, g,
                                                                partial.get<double>());
  RF_CUDA_CHECK_LAUNCH();
  bias_partials_kernel<<<grid_for(s.cols), kBlock, 0, stream_of(e)>>>(s.cols, splits, partial.get<double>(), dbias);
  RF_CUDA_CHECK_LAUNCH();
}
void relu_forward(const Exec& e, int64_t n, const float* x, float* out) {
  if (n <= 0) return;
  relu_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, x, out);
  RF_CUDA_CHECK_LAUNCH();
}
void relu_backward(const Exec& e, int64_t n, const float* out, const float* g, float* dx, bool acc) {
  if (n <= 0) return;
  relu_backward_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, out, g, dx, acc);
  RF_CUDA_CHECK_LAUNCH();
}
void sgd_step(const Exec& e, const SgdConfig& c, int64_t n, float* param, const float* grad, float* buf,
              bool first) {
  if (n <= 0) return;
  sgd_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, -c.lr, 1.0f - c.dampening, c.weight_decay, c.momentum,
                                                        c.weight_decay != 0.0f, c.momentum != 0.0f, first,
                                                        c.nesterov, param, grad, buf);
  RF_CUDA_CHECK_LAUNCH();
}
void adamw_step(const Exec& e, const AdamWConfig& c, int64_t n, float* param, const float* grad, float* m, float* v,
                int64_t step) {
  if (n <= 0) return;
  // The host scalars exactly as the CPU computes them: in double, then float.
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(step));
  AdamScalars s{};
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.eps = c.eps;
  s.decay = static_cast<float>(1.0 - static_cast<double>(c.lr) * c.weight_decay);
  s.neg_step_size = static_cast<float>(-(static_cast<double>(c.lr) / bc1));
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.one_minus_b1 = 1.0f - c.beta1;
  s.one_minus_b2 = 1.0f - c.beta2;
  adamw_kernel<<<grid_for(n), kBlock, 0, stream_of(e)>>>(n, s, param, grad, m, v);
  RF_CUDA_CHECK_LAUNCH();
}

}  // namespace rf::kernels::cuda_ops
