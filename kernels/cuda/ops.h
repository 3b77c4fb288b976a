#pragma once
// The CUDA table's entries (table.cpp lists them), one launcher each: host functions that
// check their arguments' trivial cases, launch their kernels on e.stream and check every
// launch. Internal to kernels/cuda; the kernels themselves are in the .cu files.
#include <cstdint>

#include "kernels/op_table.h"

namespace rf::kernels::cuda_ops {

// elementwise.cu
void fill(const Exec&, int64_t n, float value, float* out);
void copy(const Exec&, int64_t n, const float* x, float* y);
void copy_i32(const Exec&, int64_t n, const int32_t* x, int32_t* y);
void accumulate(const Exec&, int64_t n, const float* g, float* dx, bool acc);
void divide_by(const Exec&, int64_t n, const float* divisor, float* x);
void add_forward(const Exec&, int64_t n, const float* a, const float* b, float* out);
void mul_forward(const Exec&, int64_t n, const float* a, const float* b, float* out);
void mul_backward(const Exec&, int64_t n, const float* a, const float* b, const float* g, float* da, float* db);
void sum_forward(const Exec&, int64_t n, const float* x, float* out);
void sum_backward(const Exec&, int64_t n, const float* g, float* dx);
void bias_forward(const Exec&, const BiasShape&, const float* x, const float* bias, float* out);
void bias_backward(const Exec&, const BiasShape&, const float* g, float* dbias);
void relu_forward(const Exec&, int64_t n, const float* x, float* out);
void relu_backward(const Exec&, int64_t n, const float* out, const float* g, float* dx, bool acc);
void sgd_step(const Exec&, const SgdConfig&, int64_t n, float* param, const float* grad, float* buf, bool first);
void adamw_step(const Exec&, const AdamWConfig&, int64_t n, float* param, const float* grad, float* m, float* v,
                int64_t step);

// blas.cu
void matmul_forward(const Exec&, const MatmulShape&, const float* a, const float* b, float* c);
void matmul_backward(const Exec&, const MatmulShape&, const float* a, const float* b, const float* g, float* da,
                     float beta_a, float* db, float beta_b);

// conv.cu
void conv2d_forward(const Exec&, const ConvShape&, const float* x, const float* w, const float* bias, float* out);
void conv2d_backward(const Exec&, const ConvShape&, const float* x, const float* w, const float* g, float* dx,
                     bool accumulate_dx, float* dw, float* dbias);

// nn.cu
void max_pool2d_forward(const Exec&, const PoolGeometry&, const float* x, float* out, int32_t* argmax);
void max_pool2d_backward(const Exec&, const PoolGeometry&, const float* g, const int32_t* argmax, float* dx,
                         bool acc);
void log_softmax_forward(const Exec&, int64_t rows, int64_t cols, const float* x, float* y);
void log_softmax_backward(const Exec&, int64_t rows, int64_t cols, const float* y, const float* g, float* dx,
                          bool acc);
void nll_forward(const Exec&, int64_t rows, int64_t cols, const float* logp, const int32_t* labels, bool mean,
                 float* out);
void nll_backward(const Exec&, int64_t rows, int64_t cols, const int32_t* labels, const float* g, bool mean,
                  float* dlogp);

}  // namespace rf::kernels::cuda_ops
