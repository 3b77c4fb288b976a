#pragma once
// GEMM on row-major float matrices through Eigen::Map (no copies), or for small NN/TN
// products our own AVX-512 kernel (gemm_small.h, chosen by shape only):
//   C = alpha * op(A) * op(B) + beta * C,   op(X) = X or X^T
// op(A) is M x K, op(B) is K x N, C is M x N. lda/ldb/ldc are row strides (elements).
// beta is 0 (overwrite; C may hold garbage) or 1 (accumulate, the autograd rule "+=").
#include <cstdint>

namespace rf::kernels::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);

// Number of threads Eigen's GEMM may use (1 unless built with OpenMP).
void set_num_threads(int threads);
int num_threads();

}  // namespace rf::kernels::cpu
