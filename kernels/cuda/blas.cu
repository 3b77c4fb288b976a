// cuBLAS GEMM (blas.h) and the matmul entries built on it (ops.h).
#include "kernels/cuda/blas.h"

#include <cublas_v2.h>

#include <limits>
#include <map>
#include <mutex>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace rf::kernels::cuda_ops {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// The handle of `stream`, made on first use on the calling thread's current device (the
// stream's, as for every entry).
cublasHandle_t handle_for(cudaStream_t stream) {
  static std::mutex mu;
  static std::map<cudaStream_t, cublasHandle_t>* handles = new std::map<cudaStream_t, cublasHandle_t>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = handles->find(stream);
  if (it != handles->end()) return it->second;
  cublasHandle_t h = nullptr;
  RF_CUBLAS_CHECK(cublasCreate(&h));
  // cublasSetStream resets the workspace to cuBLAS's shared pool: the stream first, then
  // this handle's own workspace.
  RF_CUBLAS_CHECK(cublasSetStream(h, stream));
  void* workspace = nullptr;
  RF_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  RF_CUBLAS_CHECK(cublasSetWorkspace(h, workspace, kWorkspaceBytes));
  RF_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  RF_CUBLAS_CHECK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
  RF_CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  handles->emplace(stream, h);
  return h;
}

int as_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw rf::InvalidInput(rf::str("cuda gemm: ", what, " = ", v, " is outside cuBLAS's int range"));
  return static_cast<int>(v);
}

}  // namespace

void gemm(const Exec& e, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  cublasHandle_t h = handle_for(stream_of(e));
  // Column-major view: C^T[N, M] = op(B)^T[N, K] op(A)^T[K, M]; each stored matrix is its
  // own transpose in that view, so op_b applies to B and op_a to A unchanged.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  RF_CUBLAS_CHECK(cublasSgemm(h, op_b, op_a, as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha, b,
                              as_int(ldb, "ldb"), a, as_int(lda, "lda"), &beta, c, as_int(ldc, "ldc")));
}

void gemm_strided_batched(const Exec& e, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                          int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  cublasHandle_t h = handle_for(stream_of(e));
  // The column-major view of gemm(), each product's operands at their own offsets.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  RF_CUBLAS_CHECK(cublasSgemmStridedBatched(h, op_b, op_a, as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha, b,
                                            as_int(ldb, "ldb"), stride_b, a, as_int(lda, "lda"), stride_a, &beta, c,
                                            as_int(ldc, "ldc"), stride_c, as_int(batch, "batch")));
}

namespace {

__global__ void reduce_slices_kernel(int64_t count, int64_t splits, const float* slices, bool accumulate, float* c) {
  for (int64_t i = thread_index(); i < count; i += grid_step()) {
    float sum = accumulate ? c[i] : 0.0f;
    for (int64_t s = 0; s < splits; ++s) sum += slices[s * count + i];
    c[i] = sum;
  }
}

}  // namespace

// Pieces of at least 2048 along K, and enough of them that the slices' GEMMs cover the SMs
// (C's tiles are about 64 x 64); never more than 128 (the slices' memory and the reduction).
int64_t split_k_pieces(int64_t m, int64_t n, int64_t k) {
  const int64_t tiles = ((m + 63) / 64) * ((n + 63) / 64);
  if (tiles >= 128) return 1;
  int64_t s = (256 + tiles - 1) / tiles;
  if (s > k / 2048) s = k / 2048;
  if (s > 128) s = 128;
  return s < 2 ? 1 : s;
}

void gemm_abt_slices(const Exec& e, int64_t m, int64_t n, int64_t k, int64_t splits, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* slices) {
  if (m <= 0 || n <= 0 || splits < 1) return;
  if (k < splits) throw rf::InvalidInput(rf::str("cuda gemm: K = ", k, " cannot be cut into ", splits, " pieces"));
  const int64_t piece = k / splits;               // the first splits - 1 pieces
  const int64_t last = k - (splits - 1) * piece;  // the last takes the remainder too
  const float one = 1.0f;
  cublasHandle_t h = handle_for(stream_of(e));
  // Column-major view as in gemm(): slice^T[N, M] = B[N, K-piece] A^T[K-piece, M].
  if (splits > 1)
    RF_CUBLAS_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, as_int(n, "n"), as_int(m, "m"),
                                              as_int(piece, "k"), &one, b, as_int(ldb, "ldb"), piece, a,
                                              as_int(lda, "lda"), piece, &beta, slices, as_int(n, "ldc"), m * n,
                                              as_int(splits - 1, "splits")));
  gemm(e, false, true, m, n, last, 1.0f, a + (splits - 1) * piece, lda, b + (splits - 1) * piece, ldb, beta,
       slices + (splits - 1) * m * n, n);
}

void reduce_slices(const Exec& e, int64_t count, int64_t splits, const float* slices, bool accumulate, float* c) {
  if (count <= 0) return;
  reduce_slices_kernel<<<grid_for(count), kBlock, 0, stream_of(e)>>>(count, splits, slices, accumulate, c);
  RF_CUDA_CHECK_LAUNCH();
}

void matmul_forward(const Exec& e, const MatmulShape& s, const float* a, const float* b, float* c) {
  gemm(e, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a, s.lda, b, s.ldb, 0.0f, c, s.n);
}

// C = op(A) op(B):  dop(A) = G op(B)^T,  dop(B) = op(A)^T G (as kernels/cpu/table.cpp).
void matmul_backward(const Exec& e, const MatmulShape& s, const float* a, const float* b, const float* g, float* da,
                     float beta_a, float* db, float beta_b) {
  const int64_t M = s.m, N = s.n, K = s.k;
  const bool ta = s.trans_a, tb = s.trans_b;
  if (da) {
    if (!ta) gemm(e, false, !tb, M, K, N, 1.0f, g, N, b, s.ldb, beta_a, da, K);
    else gemm(e, tb, true, K, M, N, 1.0f, b, s.ldb, g, N, beta_a, da, M);
  }
  if (db) {
    if (!tb) gemm(e, !ta, false, K, N, M, 1.0f, a, s.lda, g, N, beta_b, db, N);
    else gemm(e, true, ta, N, K, M, 1.0f, g, N, a, s.lda, beta_b, db, K);
  }
}

}  // namespace rf::kernels::cuda_ops
