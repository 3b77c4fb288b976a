#pragma once
// GEMM on row-major float matrices: our AVX-512 kernels where they measured faster
// (gemm_small.h for small NN/TN products, gemm_packed.h for the MLP-sized ones; chosen
// by shape only, never by thread count), Eigen::Map (no copies) for the rest:
//   C = alpha * op(A) * op(B) + beta * C,   op(X) = X or X^T
// op(A) is M x K, op(B) is K x N, C is M x N. lda/ldb/ldc are row strides (elements).
// beta is 0 (overwrite; C may hold garbage) or 1 (accumulate, the autograd rule "+=").
#include <cstdint>

namespace rf::kernels::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);

// The Eigen path alone, whatever the shape (the baseline of bench/train/gemm_bench).
void gemm_eigen(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc);

// True when gemm() sends this shape to gemm_packed (gemm_packed.h): with AVX-512, every
// product that gemm_small (directly, or on a transposed copy of a narrow B) does not take.
bool gemm_packed_fits(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);

// Number of threads the GEMMs may use (1 unless built with OpenMP).
void set_num_threads(int threads);
int num_threads();

}  // namespace rf::kernels::cpu
