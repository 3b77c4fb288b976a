#pragma once
// Our packed (BLIS-style) AVX-512 GEMM for the mid-sized products of the MLP and of the
// CNN's linear layers, where Eigen's 48x4 register tile (12 accumulators) leaves most of
// Zen 4's 32 zmm registers idle:
//
//   C = alpha * op(A) op(B) + beta * C,   op(X) = X or X^T, all row-major, any lda/ldb/ldc.
//
// Blocking: K is cut into nearly equal chunks of at most KC, N into chunks of at most NC
// and M into chunks of at most MC (multiples of MR). For each (N chunk, K chunk) a KC x NC
// block of op(B) is packed into NR-column micro-panels, for each M chunk an MC x KC block
// of op(A) into MR-row micro-panels (the transposes are absorbed here), then an MR x NR
// register tile of C is accumulated per micro-panel pair. Packing buffers are thread_local
// and only grow (a page fault costs ~13 us on these machines).
//
// Determinism: every C element is the fused-multiply-add chain over k = 0, 1, ... within a
// K chunk, and the chunks are added to C in order; chunk bounds depend only on K. So the
// bits depend only on (M, N, K, transposes, alpha, beta, inputs): not on the pointers'
// alignment, on where a tile edge falls, nor on the thread count (threads split N at
// micro-panel boundaries; each element is computed entirely by one thread).
#include <cstdint>

namespace rf::kernels::cpu {

// True when this build has the AVX-512 kernel.
bool gemm_packed_available();

// beta 0 does not read C (it may hold garbage or NaN). threads >= 1 splits the columns.
void gemm_packed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc, int threads = 1);

}  // namespace rf::kernels::cpu
