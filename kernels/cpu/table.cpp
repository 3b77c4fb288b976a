#include "kernels/cpu/table.h"

#include <cstring>

#include "kernels/cpu/conv_op.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/softmax.h"

namespace rf::kernels {

namespace {

namespace kc = cpu;

void fill(const Exec&, int64_t n, float value, float* out) { kc::fill(out, n, value); }
void copy(const Exec&, int64_t n, const float* x, float* y) { kc::copy(n, x, y); }
void copy_i32(const Exec&, int64_t n, const int32_t* x, int32_t* y) {
  if (n > 0) std::memcpy(y, x, sizeof(int32_t) * static_cast<size_t>(n));
}
void accumulate(const Exec&, int64_t n, const float* g, float* dx, bool acc) {
  if (acc) kc::axpy(n, 1.0f, g, dx);
  else kc::copy(n, g, dx);
}
void divide_by(const Exec&, int64_t n, const float* divisor, float* x) {
  const float d = *divisor;
  for (int64_t i = 0; i < n; ++i) x[i] /= d;
}

void matmul_forward(const Exec&, const MatmulShape& s, const float* a, const float* b, float* c) {
  kc::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a, s.lda, b, s.ldb, 0.0f, c, s.n);
}
// C = op(A) op(B):  dop(A) = G op(B)^T,  dop(B) = op(A)^T G.
void matmul_backward(const Exec&, const MatmulShape& s, const float* a, const float* b, const float* g,
                     float* da, float beta_a, float* db, float beta_b) {
  const int64_t M = s.m, N = s.n, K = s.k;
  const bool ta = s.trans_a, tb = s.trans_b;
  if (da) {
    if (!ta) kc::gemm(false, !tb, M, K, N, 1.0f, g, N, b, s.ldb, beta_a, da, K);
    else kc::gemm(tb, true, K, M, N, 1.0f, b, s.ldb, g, N, beta_a, da, M);
  }
  if (db) {
    if (!tb) kc::gemm(!ta, false, K, N, M, 1.0f, a, s.lda, g, N, beta_b, db, N);
    else kc::gemm(true, ta, N, K, M, 1.0f, g, N, a, s.lda, beta_b, db, K);
  }
}

void add_forward(const Exec&, int64_t n, const float* a, const float* b, float* out) { kc::add(n, a, b, out); }
void mul_forward(const Exec&, int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
void mul_backward(const Exec&, int64_t n, const float* a, const float* b, const float* g, float* da,
                  float* db) {
  if (da)
    for (int64_t i = 0; i < n; ++i) da[i] += g[i] * b[i];
  if (db)
    for (int64_t i = 0; i < n; ++i) db[i] += g[i] * a[i];
}
void sum_forward(const Exec&, int64_t n, const float* x, float* out) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  out[0] = static_cast<float>(s);
}
void sum_backward(const Exec&, int64_t n, const float* g, float* dx) {
  const float v = g[0];
  for (int64_t i = 0; i < n; ++i) dx[i] += v;
}

void bias_forward(const Exec&, const BiasShape& s, const float* x, const float* bias, float* out) {
  if (s.per_channel) kc::add_channel_bias(s.rows, s.cols, s.plane, x, bias, out);
  else kc::add_row_bias(s.rows, s.cols, x, bias, out);
}
void bias_backward(const Exec&, const BiasShape& s, const float* g, float* dbias) {
  if (s.per_channel) kc::add_channel_bias_backward(s.rows, s.cols, s.plane, g, dbias);
  else kc::add_row_bias_backward(s.rows, s.cols, g, dbias);
}

void relu_forward(const Exec&, int64_t n, const float* x, float* out) { kc::relu(n, x, out); }
void relu_backward(const Exec&, int64_t n, const float* out, const float* g, float* dx, bool acc) {
  kc::relu_backward(n, out, g, dx, acc);
}

void max_pool2d_forward(const Exec&, const PoolGeometry& g, const float* x, float* out, int32_t* argmax) {
  kc::max_pool2d(g, x, out, argmax);
}
void max_pool2d_backward(const Exec&, const PoolGeometry& g, const float* dout, const int32_t* argmax,
                         float* dx, bool acc) {
  kc::max_pool2d_backward(g, dout, argmax, dx, acc);
}

void log_softmax_forward(const Exec&, int64_t rows, int64_t cols, const float* x, float* y) {
  kc::log_softmax(rows, cols, x, y);
}
void log_softmax_backward(const Exec&, int64_t rows, int64_t cols, const float* y, const float* g, float* dx,
                          bool acc) {
  kc::log_softmax_backward(rows, cols, y, g, dx, acc);
}
void nll_forward(const Exec&, int64_t rows, int64_t cols, const float* logp, const int32_t* labels, bool mean,
                 float* out) {
  const float s = kc::nll_sum(rows, cols, logp, labels);
  out[0] = mean ? s / static_cast<float>(rows) : s;
}
void nll_backward(const Exec&, int64_t rows, int64_t cols, const int32_t* labels, const float* g, bool mean,
                  float* dlogp) {
  const float scale = mean ? g[0] / static_cast<float>(rows) : g[0];
  kc::nll_backward(rows, cols, labels, scale, dlogp);
}

void sgd_step(const Exec&, const SgdConfig& c, int64_t n, float* param, const float* grad, float* buf,
              bool first_step) {
  kc::sgd_step(c, n, param, grad, buf, first_step);
}
void adamw_step(const Exec&, const AdamWConfig& c, int64_t n, float* param, const float* grad, float* m,
                float* v, int64_t step) {
  kc::adamw_step(c, n, param, grad, m, v, step);
}

// Designated initialisers: an entry left out here is a null pointer, and
// -Wmissing-field-initializers (under -Wextra) names it at compile time.
const OpTable kCpu = {
    .device = "cpu",
    .fill = fill,
    .copy = copy,
    .copy_i32 = copy_i32,
    .accumulate = accumulate,
    .divide_by = divide_by,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .add_forward = add_forward,
    .mul_forward = mul_forward,
    .mul_backward = mul_backward,
    .sum_forward = sum_forward,
    .sum_backward = sum_backward,
    .bias_forward = bias_forward,
    .bias_backward = bias_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .conv2d_forward = kc::conv2d_forward,
    .conv2d_backward = kc::conv2d_backward,
    .max_pool2d_forward = max_pool2d_forward,
    .max_pool2d_backward = max_pool2d_backward,
    .log_softmax_forward = log_softmax_forward,
    .log_softmax_backward = log_softmax_backward,
    .nll_forward = nll_forward,
    .nll_backward = nll_backward,
    .sgd_step = sgd_step,
    .adamw_step = adamw_step,
};

}  // namespace

const OpTable& cpu_table() { return kCpu; }

}  // namespace rf::kernels
