#include "kernels/cpu/gemm.h"

#include <Eigen/Core>
#include <vector>

#include "base/enforce.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/gemm_small.h"

namespace rf::kernels::cpu {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
using MMap = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;

// The four transpose cases are spelled out so Eigen sees a plain product expression in
// each and picks its blocked GEMM without materialising a transposed copy.
template <typename LA, typename LB>
void run(const LA& a, const LB& b, float alpha, float beta, MMap& c) {
  if (beta == 0.0f) {
    if (alpha == 1.0f) c.noalias() = a * b;
    else c.noalias() = alpha * (a * b);
  } else {
    if (beta != 1.0f) c *= beta;
    if (alpha == 1.0f) c.noalias() += a * b;
    else c.noalias() += alpha * (a * b);
  }
}

}  // namespace

void gemm_eigen(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                int64_t ldc) {
  RF_ENFORCE(M >= 0 && N >= 0 && K >= 0, "gemm: negative size ", M, "x", N, "x", K);
  if (M == 0 || N == 0) return;
  MMap c(C, M, N, Eigen::OuterStride<>(ldc));
  if (K == 0) {
    if (beta == 0.0f) c.setZero();
    else if (beta != 1.0f) c *= beta;
    return;
  }
  // Stored shapes: A is M x K (or K x M when transposed), B is K x N (or N x K).
  CMap a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
  CMap b(B, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
  if (!trans_a && !trans_b) run(a, b, alpha, beta, c);
  else if (!trans_a && trans_b) run(a, b.transpose(), alpha, beta, c);
  else if (trans_a && !trans_b) run(a.transpose(), b, alpha, beta, c);
  else run(a.transpose(), b.transpose(), alpha, beta, c);
}

namespace {

// Narrow transposed-B products (the 10 logits, x W^T with W 10 x K: gemm_packed ran them
// at 0.55x of Eigen, most of its 32-wide tile being padding) go to gemm_small on a
// transposed copy of B.
bool narrow_fits(bool trans_b, int64_t M, int64_t N, int64_t K) {
  return trans_b && N < 32 && gemm_small_fits(false, M, N, K);
}

}  // namespace

// Measured per shape with bench/train/gemm_bench (bench/RESULTS.md): NN/TN products up to 64M
// go to gemm_small, narrow transposed-B ones to gemm_small on B^T; everything else (the
// forward of every Linear layer, x W^T, and the largest products) comes here. With AVX-512
// no shape is left to Eigen: Eigen's blocking depends on its thread count, so --threads
// would change the bits.
bool gemm_packed_fits(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  (void)trans_a;
  return gemm_packed_available() && !gemm_small_fits(trans_b, M, N, K) &&
         !narrow_fits(trans_b, M, N, K);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  RF_ENFORCE(M >= 0 && N >= 0 && K >= 0, "gemm: negative size ", M, "x", N, "x", K);
  if (M == 0 || N == 0) return;
  // Our kernels are chosen by shape only, whatever the thread count: the choice must not
  // depend on --threads, or the same run with more threads would round differently.
  if (K > 0 && gemm_small_fits(trans_b, M, N, K)) {
    gemm_small(M, N, K, alpha, A, trans_a ? 1 : lda, trans_a ? lda : 1, B, ldb, beta, C, ldc,
               num_threads());
    return;
  }
  if (K > 0 && narrow_fits(trans_b, M, N, K)) {
    thread_local std::vector<float> bt;  // K x N, only grows
    if (bt.size() < static_cast<size_t>(K * N)) bt.resize(static_cast<size_t>(K * N));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) bt[k * N + n] = B[n * ldb + k];
    gemm_small(M, N, K, alpha, A, trans_a ? 1 : lda, trans_a ? lda : 1, bt.data(), N, beta, C,
               ldc, num_threads());
    return;
  }
  if (K > 0 && gemm_packed_fits(trans_a, trans_b, M, N, K)) {
    gemm_packed(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, num_threads());
    return;
  }
  gemm_eigen(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void set_num_threads(int threads) {
  RF_ENFORCE(threads >= 1, "threads must be >= 1, got ", threads);
  Eigen::setNbThreads(threads);
}

int num_threads() { return Eigen::nbThreads(); }

}  // namespace rf::kernels::cpu
