#pragma once
// Our own AVX-512 GEMM without packing, first for the small, cache-resident shapes of a
// convolution (per sample: W[32x400] col[400x196], W^T G[32x196], ...), where Eigen's
// general blocked GEMM spends much of its time packing, zero-filling C for beta 0, and on
// a 48x4 register tile that fits M = 16 or 32 badly; on Zen 4 it also beats Eigen and
// gemm_packed on the MLP's NN/TN products. gemm() (gemm.h) calls it when
// gemm_small_fits() says so.
//
//   C = alpha * op(A) B + beta C, B row-major K x N (the NN and TN cases),
//   A(i, k) = A[i * a_row + k * a_col] (a_row = lda, a_col = 1 plain; 1, lda transposed).
//
// No packing: a tile of 8 rows x 32 columns of C stays in registers for the whole K loop,
// each step broadcasting one A element per row against two vectors of one B row. Every C
// element is summed in one fixed order (k = 0, 1, ...): same inputs, same bits.
#include <cstdint>

namespace rf::kernels::cpu {

// True when this build has the AVX-512 kernel and the shape is one it was measured faster on.
bool gemm_small_fits(bool trans_b, int64_t M, int64_t N, int64_t K);

// threads > 1 splits the columns (same bits for any thread count).
void gemm_small(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row,
                int64_t a_col, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                int threads = 1);

}  // namespace rf::kernels::cpu
