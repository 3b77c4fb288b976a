#include "kernels/cpu/gemm_small.h"

#include <algorithm>

#include "base/enforce.h"

#if defined(__AVX512F__)
#include "kernels/cpu/avx512_common.h"
#endif

namespace rf::kernels::cpu {

#if defined(__AVX512F__)
namespace {

using avx512::finish;
using avx512::lanes;

// MR rows x NV vectors of C; the last vector covers only `last` lanes (masked loads and
// stores, so a ragged edge costs one partial vector, never a scalar loop). MR * NV <= 16
// accumulators plus NV B vectors and a broadcast stay within the 32 zmm registers.
template <int MR, int NV>
void bcast_tile(int64_t K, const float* A, int64_t a_row, int64_t a_col, const float* B,
                int64_t ldb, __mmask16 last, float alpha, float beta, float* C, int64_t ldc) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      bv[v] = v + 1 == NV ? _mm512_maskz_loadu_ps(last, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
    const float* a = A + k * a_col;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i * a_row]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v + 1 == NV ? last : static_cast<__mmask16>(0xFFFF);
      float* c = C + i * ldc + 16 * v;
      _mm512_mask_storeu_ps(c, m, finish(acc[i][v], alpha, beta, c, m));
    }
}

template <int NV>
void bcast_rows(int64_t mr, int64_t K, const float* A, int64_t a_row, int64_t a_col,
                const float* B, int64_t ldb, __mmask16 last, float alpha, float beta, float* C,
                int64_t ldc) {
  switch (mr) {
#define RF_ROWS(R) \
  case R: return bcast_tile<R, NV>(K, A, a_row, a_col, B, ldb, last, alpha, beta, C, ldc);
    RF_ROWS(1) RF_ROWS(2) RF_ROWS(3) RF_ROWS(4) RF_ROWS(5) RF_ROWS(6) RF_ROWS(7) RF_ROWS(8)
#undef RF_ROWS
    default: RF_ENFORCE(false, "gemm_small: tile of ", mr, " rows");
  }
}

// Columns [n_begin, n_end) of C.
void small_cols(int64_t M, int64_t n_begin, int64_t n_end, int64_t K, float alpha,
                const float* A, int64_t a_row, int64_t a_col, const float* B, int64_t ldb,
                float beta, float* C, int64_t ldc) {
  // Rows outer: the 8 rows of A a tile broadcasts (8 x K floats) stay in L1 while the
  // column tiles stream B from L2.
  for (int64_t i0 = 0; i0 < M; i0 += 8) {
    const int64_t mr = std::min<int64_t>(8, M - i0);
    const float* Ai = A + i0 * a_row;
    for (int64_t j0 = n_begin; j0 < n_end; j0 += 32) {
      const int64_t nr = std::min<int64_t>(32, n_end - j0);
      float* c = C + i0 * ldc + j0;
      if (nr > 16)
        bcast_rows<2>(mr, K, Ai, a_row, a_col, B + j0, ldb, lanes(nr - 16), alpha, beta, c, ldc);
      else
        bcast_rows<1>(mr, K, Ai, a_row, a_col, B + j0, ldb, lanes(nr), alpha, beta, c, ldc);
    }
  }
}

}  // namespace

// Routed by shape from bench/train/gemm_bench (one thread, CPU time; bench/RESULTS.md):
// with no packing to pay for, this kernel beats Eigen on every NN/TN shape of the models
// (up to the MLP's 512x784x128 = 51M) and ties or beats gemm_packed there. Beyond 64M it
// is unmeasured and, having no cache blocking, left to gemm_packed.
bool gemm_small_fits(bool trans_b, int64_t M, int64_t N, int64_t K) {
  return !trans_b && M * N * K <= 64 * 1024 * 1024;
}

void gemm_small(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_row,
                int64_t a_col, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                int threads) {
  // Threads take contiguous runs of 32-column tiles (each element is one FMA chain over k);
  // products under 1M multiply-adds run on one thread.
  avx512::for_column_runs(N, 32, M * N * K >= 1024 * 1024 ? threads : 1, [&](int64_t b, int64_t e) {
    small_cols(M, b, e, K, alpha, A, a_row, a_col, B, ldb, beta, C, ldc);
  });
}

#else  // no AVX-512: Eigen runs every shape

bool gemm_small_fits(bool, int64_t, int64_t, int64_t) { return false; }
void gemm_small(int64_t, int64_t, int64_t, float, const float*, int64_t, int64_t, const float*,
                int64_t, float, float*, int64_t, int) {
  RF_ENFORCE(false, "gemm_small needs AVX-512");
}
#endif

}  // namespace rf::kernels::cpu
