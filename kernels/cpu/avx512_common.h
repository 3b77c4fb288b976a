#pragma once
// What our AVX-512 GEMM kernels (gemm_small.cpp, gemm_packed.cpp) share: edge masks, the
// store epilogue (alpha, beta), and the split of C's columns over threads. Internal to
// kernels/cpu; include only under __AVX512F__.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace rf::kernels::cpu::avx512 {

// The first n lanes of a 16-float vector (none for n <= 0, all for n >= 16).
inline __mmask16 lanes(int64_t n) {
  return n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
}

// C vector = alpha * acc + beta * C; beta 0 does not read C (it may hold garbage).
inline __m512 finish(__m512 acc, float alpha, float beta, const float* c, __mmask16 m) {
  if (alpha != 1.0f) acc = _mm512_mul_ps(acc, _mm512_set1_ps(alpha));
  if (beta == 0.0f) return acc;
  const __m512 old = _mm512_maskz_loadu_ps(m, c);
  if (beta == 1.0f) return _mm512_add_ps(acc, old);
  return _mm512_fmadd_ps(_mm512_set1_ps(beta), old, acc);
}

// Runs cols(begin, end) over the columns [0, N) of C: with threads > 1, each thread takes a
// contiguous run of `tile`-column tiles (bounds depend only on N, tile and the thread
// count). The split changes which thread computes an element, never how, so the bits do
// not depend on the thread count.
template <typename Cols>
void for_column_runs(int64_t N, int64_t tile, int threads, Cols cols) {
  const int64_t tiles = (N + tile - 1) / tile;
  const int64_t parts = std::min<int64_t>(std::max(threads, 1), tiles);
#if defined(_OPENMP)
  if (parts > 1) {
#pragma omp parallel num_threads(static_cast<int>(parts))
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t b = std::min(N, tiles * t / nt * tile), e = std::min(N, tiles * (t + 1) / nt * tile);
      if (b < e) cols(b, e);
    }
    return;
  }
#endif
  (void)parts;  // without OpenMP one thread does every column
  cols(int64_t{0}, N);
}

}  // namespace rf::kernels::cpu::avx512
