#pragma once
// OpTable — the one op table of a device: every computation core does, as whole ops,
// forward and backward together, each taking an Exec (stream + scratch). core chooses a
// table by device (core/device_runtime.h) and calls nothing else that touches tensor
// memory; each device makes its own choices inside its entries (the CPU's im2col or
// direct convolution, packed or small GEMM), so nothing outside a device's folder knows
// how it computes.
//
// Tables: kernels/cpu (always), kernels/cuda (when nvcc is found) and kernels/reference,
// the oracle: plain loops that are obviously correct and slow. tests/kernels/oracle_checks
// checks every entry of a table against the reference on random inputs, and fails when an
// entry has no check (kOpTableEntries counts them): the CPU table in test_oracle, the CUDA
// table in test_kernels_cuda (label gpu, on a GPU only).
//
// Conventions. Pointers are device memory of the table's device. "accumulate" false
// means the output may hold garbage and every element is written; true means +=. Shapes
// are validated by core before an entry runs: entries assume valid arguments.
#include <cstdint>

#include "kernels/exec.h"
#include "kernels/geometry.h"

namespace rf::kernels {

// C[M, N] = op(A) op(B), op(X) = X^T when the flag is set; lda/ldb are the row strides of
// A and B as stored.
struct MatmulShape {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb;
};

struct OpTable {
  const char* device;  // "cpu", "cuda", "reference"

  // Memory: out[i] = value; y = x (same device).
  void (*fill)(const Exec&, int64_t n, float value, float* out);
  void (*copy)(const Exec&, int64_t n, const float* x, float* y);
  void (*copy_i32)(const Exec&, int64_t n, const int32_t* x, int32_t* y);
  // A gradient arriving unchanged (add, a broadcast's identity part): dx = g or dx += g.
  void (*accumulate)(const Exec&, int64_t n, const float* g, float* dx, bool accumulate);
  // x[i] /= *divisor, the divisor read on the device (the reducer's global sample count).
  void (*divide_by)(const Exec&, int64_t n, const float* divisor, float* x);

  void (*matmul_forward)(const Exec&, const MatmulShape&, const float* a, const float* b, float* c);
  // da (beta_a 0: =, 1: +=) and db likewise; either may be null (no gradient wanted).
  void (*matmul_backward)(const Exec&, const MatmulShape&, const float* a, const float* b, const float* g,
                          float* da, float beta_a, float* db, float beta_b);

  void (*add_forward)(const Exec&, int64_t n, const float* a, const float* b, float* out);
  void (*mul_forward)(const Exec&, int64_t n, const float* a, const float* b, float* out);
  // da += g * b, db += g * a (either may be null).
  void (*mul_backward)(const Exec&, int64_t n, const float* a, const float* b, const float* g, float* da,
                       float* db);
  // out[0] = sum of x, accumulated in double and rounded once.
  void (*sum_forward)(const Exec&, int64_t n, const float* x, float* out);
  // dx[i] += g[0]
  void (*sum_backward)(const Exec&, int64_t n, const float* g, float* dx);

  // Bias broadcast: rows x cols (+ bias[cols]), or NCHW with plane = H*W (+ bias[C]).
  void (*bias_forward)(const Exec&, const BiasShape&, const float* x, const float* bias, float* out);
  // dbias += sum over the broadcast axes of g (dx is handled by accumulate).
  void (*bias_backward)(const Exec&, const BiasShape&, const float* g, float* dbias);

  void (*relu_forward)(const Exec&, int64_t n, const float* x, float* out);
  void (*relu_backward)(const Exec&, int64_t n, const float* out, const float* g, float* dx, bool accumulate);

  // x [N, C, H, W], w [OC, C, KH, KW], bias [OC] or null, out [N, OC, OH, OW].
  void (*conv2d_forward)(const Exec&, const ConvShape&, const float* x, const float* w, const float* bias,
                         float* out);
  // dx (accumulate flag), dw += , dbias += ; any of them may be null.
  void (*conv2d_backward)(const Exec&, const ConvShape&, const float* x, const float* w, const float* g,
                          float* dx, bool accumulate_dx, float* dw, float* dbias);

  void (*max_pool2d_forward)(const Exec&, const PoolGeometry&, const float* x, float* out, int32_t* argmax);
  void (*max_pool2d_backward)(const Exec&, const PoolGeometry&, const float* g, const int32_t* argmax,
                              float* dx, bool accumulate);

  void (*log_softmax_forward)(const Exec&, int64_t rows, int64_t cols, const float* x, float* y);
  void (*log_softmax_backward)(const Exec&, int64_t rows, int64_t cols, const float* y, const float* g,
                               float* dx, bool accumulate);
  // out[0] = -sum_r logp[r, labels[r]] (double accumulation, rounded once), divided by
  // rows when mean. Labels are in range (core checks them).
  void (*nll_forward)(const Exec&, int64_t rows, int64_t cols, const float* logp, const int32_t* labels,
                      bool mean, float* out);
  // dlogp[r, labels[r]] += -(g[0] / rows when mean, else g[0]).
  void (*nll_backward)(const Exec&, int64_t rows, int64_t cols, const int32_t* labels, const float* g, bool mean,
                       float* dlogp);

  void (*sgd_step)(const Exec&, const SgdConfig&, int64_t n, float* param, const float* grad, float* momentum_buf,
                   bool first_step);
  void (*adamw_step)(const Exec&, const AdamWConfig&, int64_t n, float* param, const float* grad, float* exp_avg,
                     float* exp_avg_sq, int64_t step);
};

// Entries of OpTable after `device`; the oracle test checks it has checked this many.
inline constexpr int kOpTableEntries = static_cast<int>((sizeof(OpTable) - sizeof(const char*)) / sizeof(void (*)()));

}  // namespace rf::kernels
