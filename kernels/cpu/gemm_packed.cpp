#include "kernels/cpu/gemm_packed.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/enforce.h"

#if defined(__AVX512F__)
#include "kernels/cpu/avx512_common.h"
#endif

namespace rf::kernels::cpu {

#if defined(__AVX512F__)
namespace {

using avx512::finish;
using avx512::lanes;

// Register tile: MR rows x NR = 16 * NV columns of C, MR * NV accumulators (of 32 zmm),
// NV vectors of B per k and one broadcast of A folded into each FMA ({1to16}).
constexpr int MR = 12;
constexpr int NV = 2;
constexpr int NR = 16 * NV;
// Cache blocking for Zen 4 (L1d 32 KiB, L2 1 MiB per core): an A micro-panel (MR x KC,
// 18 KiB) stays in L1 while the column tiles stream the KC x NC block of B (<= 768 KiB)
// from L2; the MC x KC block of A (<= 216 KiB) sits in L2 beside it.
constexpr int64_t KC = 384;
constexpr int64_t NC = 512;
constexpr int64_t MC = 144;  // multiple of MR

// R (<= MR) rows x NR columns of C from an A micro-panel (a[k * MR + i]) and a B
// micro-panel (b[k * NR + j]); only the first nr columns are stored.
template <int R>
void micro_kernel(int64_t kc, const float* a, const float* b, float alpha, float beta, float* C,
                  int64_t ldc, int64_t nr) {
  __m512 acc[R][NV];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = lanes(nr - 16 * v);
      float* c = C + i * ldc + 16 * v;
      _mm512_mask_storeu_ps(c, m, finish(acc[i][v], alpha, beta, c, m));
    }
}

void micro_rows(int64_t r, int64_t kc, const float* a, const float* b, float alpha, float beta,
                float* C, int64_t ldc, int64_t nr) {
  switch (r) {
#define RF_ROWS(R) \
  case R: return micro_kernel<R>(kc, a, b, alpha, beta, C, ldc, nr);
    RF_ROWS(1) RF_ROWS(2) RF_ROWS(3) RF_ROWS(4) RF_ROWS(5) RF_ROWS(6)
    RF_ROWS(7) RF_ROWS(8) RF_ROWS(9) RF_ROWS(10) RF_ROWS(11) RF_ROWS(12)
#undef RF_ROWS
    default: RF_ENFORCE(false, "gemm_packed: tile of ", r, " rows");
  }
}

// In-register transpose of a 16 x 16 block: r[i] lane j becomes r[j] lane i.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  // u[4g + c], 128-bit lane L, holds column 4L + c of rows 4g..4g+3.
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// dst[k * stride + r] = src[r * ld + k] for r < rows (<= 16), k < kc; lanes r >= rows of
// each 16-wide store are zero when store_mask covers them.
void pack_transposed(const float* src, int64_t ld, int64_t rows, int64_t kc, float* dst,
                     int64_t stride, __mmask16 store_mask) {
  for (int64_t k0 = 0; k0 < kc; k0 += 16) {
    const int64_t kn = std::min<int64_t>(16, kc - k0);
    const __mmask16 km = lanes(kn);
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      r[i] = i < rows ? _mm512_maskz_loadu_ps(km, src + i * ld + k0) : _mm512_setzero_ps();
    transpose16(r);
    for (int64_t t = 0; t < kn; ++t) _mm512_mask_storeu_ps(dst + (k0 + t) * stride, store_mask, r[t]);
  }
}

// The MC x KC block of op(A) at (i0, p0), mc x kc, into MR-row micro-panels of kc x MR.
// Rows past mc in the last panel are left unset: the kernel for that panel reads only mc
// % MR rows.
void pack_a(bool trans, const float* A, int64_t lda, int64_t i0, int64_t p0, int64_t mc,
            int64_t kc, float* dst) {
  for (int64_t ip = 0; ip < mc; ip += MR) {
    const int64_t rows = std::min<int64_t>(MR, mc - ip);
    float* d = dst + ip * kc;
    if (trans) {  // stored K x M: row k holds op(A)(., k) contiguously
      const __mmask16 m = lanes(rows);
      const float* s = A + p0 * lda + i0 + ip;
      for (int64_t k = 0; k < kc; ++k)
        _mm512_mask_storeu_ps(d + k * MR, m, _mm512_maskz_loadu_ps(m, s + k * lda));
    } else {
      pack_transposed(A + (i0 + ip) * lda + p0, lda, rows, kc, d, MR, lanes(rows));
    }
  }
}

// The KC x NC block of op(B) at (p0, j0), kc x nc, into NR-column micro-panels of kc x NR,
// zero-padded past nc.
void pack_b(bool trans, const float* B, int64_t ldb, int64_t p0, int64_t j0, int64_t kc,
            int64_t nc, float* dst) {
  for (int64_t jp = 0; jp < nc; jp += NR) {
    const int64_t cols = std::min<int64_t>(NR, nc - jp);
    float* d = dst + jp * kc;
    if (!trans) {  // stored K x N
      const float* s = B + p0 * ldb + j0 + jp;
      for (int64_t k = 0; k < kc; ++k)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const __mmask16 m = lanes(cols - 16 * v);
          _mm512_store_ps(d + k * NR + 16 * v, _mm512_maskz_loadu_ps(m, s + k * ldb + 16 * v));
        }
    } else {  // stored N x K: each group of 16 columns is a 16-row transpose
      for (int v = 0; v < NV; ++v) {
        const int64_t rows = std::max<int64_t>(0, std::min<int64_t>(16, cols - 16 * v));
        pack_transposed(B + (j0 + jp + 16 * v) * ldb + p0, ldb, rows, kc, d + 16 * v, NR,
                        static_cast<__mmask16>(0xFFFF));
      }
    }
  }
}

// A 64-byte aligned scratch buffer that only grows.
struct Scratch {
  float* p = nullptr;
  size_t n = 0;
  ~Scratch() { std::free(p); }
  float* get(size_t want) {
    if (want > n) {
      std::free(p);
      p = static_cast<float*>(std::aligned_alloc(64, (want * sizeof(float) + 63) / 64 * 64));
      if (p == nullptr) throw std::bad_alloc();
      n = want;
    }
    return p;
  }
};

// Chunk c of `total` cut into `count` nearly equal parts (bounds depend only on total).
inline int64_t cut(int64_t total, int64_t count, int64_t c) { return total * c / count; }

// Columns [n_begin, n_end) of C.
void gemm_cols(bool ta, bool tb, int64_t M, int64_t n_begin, int64_t n_end, int64_t K,
               float alpha, const float* A, int64_t lda, const float* B, int64_t ldb,
               float beta, float* C, int64_t ldc) {
  thread_local Scratch pa, pb;
  const int64_t nk = (K + KC - 1) / KC;
  float* bp = pb.get(static_cast<size_t>(KC * NC));
  float* ap = pa.get(static_cast<size_t>(KC * MC));
  for (int64_t j0 = n_begin; j0 < n_end; j0 += NC) {
    const int64_t nc = std::min<int64_t>(NC, n_end - j0);
    for (int64_t p = 0; p < nk; ++p) {
      const int64_t p0 = cut(K, nk, p), kc = cut(K, nk, p + 1) - p0;
      const float beta_p = p == 0 ? beta : 1.0f;
      pack_b(tb, B, ldb, p0, j0, kc, nc, bp);
      for (int64_t i0 = 0; i0 < M; i0 += MC) {
        const int64_t mc = std::min<int64_t>(MC, M - i0);
        pack_a(ta, A, lda, i0, p0, mc, kc, ap);
        for (int64_t ir = 0; ir < mc; ir += MR) {
          const int64_t rows = std::min<int64_t>(MR, mc - ir);
          const float* a = ap + ir * kc;
          float* c = C + (i0 + ir) * ldc + j0;
          for (int64_t jr = 0; jr < nc; jr += NR)
            micro_rows(rows, kc, a, bp + jr * kc, alpha, beta_p, c + jr, ldc,
                       std::min<int64_t>(NR, nc - jr));
        }
      }
    }
  }
}

}  // namespace

bool gemm_packed_available() { return true; }

void gemm_packed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                 float* C, int64_t ldc, int threads) {
  RF_ENFORCE(M >= 0 && N >= 0 && K >= 1, "gemm_packed: bad size ", M, "x", N, "x", K);
  if (M == 0 || N == 0) return;
  // Threads take contiguous runs of NR-column micro-panels.
  avx512::for_column_runs(N, NR, threads, [&](int64_t b, int64_t e) {
    gemm_cols(trans_a, trans_b, M, b, e, K, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}

#else  // no AVX-512: gemm() runs Eigen

bool gemm_packed_available() { return false; }
void gemm_packed(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                 const float*, int64_t, float, float*, int64_t, int) {
  RF_ENFORCE(false, "gemm_packed needs AVX-512");
}
#endif

}  // namespace rf::kernels::cpu
