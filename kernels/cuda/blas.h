#pragma once
// Row-major GEMM on the CUDA table's stream through cuBLAS:
//   C[M, N] = alpha op(A) op(B) + beta C, lda/ldb/ldc row strides as stored (the CPU's
//   kernels/cpu/gemm.h signature). beta 0 never reads C.
// cuBLAS is column-major: a row-major [R, S] matrix is its column-major [S, R] transpose,
// so C^T = op(B)^T op(A)^T is computed with the operands swapped and each op kept.
//
// Determinism (cuBLAS gives the same bits run to run on one GPU model when each stream has
// its own handle and workspace): one handle per stream, made on the stream's first GEMM
// with a 32 MiB workspace of its own, atomics not allowed, CUBLAS_DEFAULT_MATH (full fp32;
// TF32 only ever comes with CUBLAS_TF32_TENSOR_OP_MATH, which is never set). Handles and
// workspaces live for the process.
#include <cstdint>

#include "kernels/exec.h"

namespace rf::kernels::cuda_ops {

void gemm(const Exec& e, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// `batch` independent GEMMs of gemm()'s form in one cuBLAS call: product i reads
// a + i * stride_a and b + i * stride_b and writes c + i * stride_c (a stride 0 shares one
// matrix, e.g. a convolution's weights across its samples).
void gemm_strided_batched(const Exec& e, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                          int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch);

// A reduction-heavy product: C[M, N] (+)= A[M, K] B[N, K]^T with K much larger than M x N
// (a convolution's weight gradient: K is every output position of the batch). One GEMM
// would run on as few blocks as C has tiles (one or a few of the GPU's 132 SMs); this one
// cuts K into `splits` contiguous pieces, one strided-batched GEMM writes each piece's
// product into a slice of its own, and reduce_slices sums the slices in a fixed order:
// deterministic, no atomics. `slices` holds splits x M x N floats; beta 0 overwrites them,
// 1 adds (several chunks of K); K >= splits. split_k_pieces says how many pieces suit (1: use gemm).
int64_t split_k_pieces(int64_t m, int64_t n, int64_t k);
void gemm_abt_slices(const Exec& e, int64_t m, int64_t n, int64_t k, int64_t splits, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* slices);
// C[i] = (accumulate ? C[i] : 0) + slice 0 [i] + slice 1 [i] + ... in that order.
void reduce_slices(const Exec& e, int64_t count, int64_t splits, const float* slices, bool accumulate, float* c);

}  // namespace rf::kernels::cuda_ops
