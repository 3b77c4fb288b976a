// conv_direct (the implicit-GEMM stride-1 convolution) against im2col + GEMM on the same
// data: every tile shape (one vector per row and two output rows, two vectors per row,
// the odd last row), channel counts that are not a multiple of the 8-channel tile, with
// and without padding, overwrite and accumulate. conv_direct_weight_grad against
// G col^T the same way; transpose; gemm_small against a naive product on shapes spanning
// several tiles, with ragged edges and leading dimensions.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_small.h"
#include "tests/skip.h"

using namespace rf::kernels::cpu;

namespace {
// The AVX-512 kernels are compiled only with -mavx512f (RINGFENCE_NATIVE on such a CPU);
// elsewhere every *_fits() is false and there is nothing to compare.
const char* const kNotBuilt = "the AVX-512 kernels are not built here (no -mavx512f): nothing to compare";
bool avx512_built() { return gemm_small_fits(false, 1, 1, 1); }
}  // namespace

TEST_CASE("conv_direct equals im2col + gemm") {
  if (!avx512_built()) return rf::test::skip(kNotBuilt);
  struct Case { int64_t C, H, W, K, pad, M; };
  const Case cases[] = {
      {1, 28, 28, 5, 2, 16},  // the CNN's first conv: two vectors per output row
      {16, 14, 14, 5, 2, 32}, // its second: one vector, two rows per tile
      {3, 7, 9, 3, 1, 11},    // odd output height (a one-row tile), 8 + 3 channels
      {2, 6, 32, 3, 1, 5},    // out_w 32: two full vectors
      {2, 5, 19, 3, 0, 9},    // no padding, out_w 17: a one-lane second vector
      {4, 5, 5, 3, 2, 1},     // padding K-1 (the input-gradient geometry), one channel
  };
  for (const Case& c : cases) {
    CAPTURE(c.C);
    CAPTURE(c.W);
    CAPTURE(c.M);
    const ConvGeometry g{c.C, c.H, c.W, c.K, c.K, 1, c.pad};
    REQUIRE(conv_direct_fits(g));
    const int64_t P = g.col_cols(), CKK = g.col_rows();
    std::vector<float> x(c.C * c.H * c.W), w(c.M * CKK), col(CKK * P), pad(g.padded_size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.3f * i + 0.2f);
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.37f * i);
    std::vector<float> ref(c.M * P), out(c.M * P);
    im2col(g, x.data(), col.data(), P, pad.data());
    gemm(false, false, c.M, P, CKK, 1.0f, w.data(), CKK, col.data(), P, 0.0f, ref.data(), P);

    const float* src = x.data();
    if (c.pad > 0) {
      pad_image(g, x.data(), pad.data());
      src = pad.data();
    }
    for (float& v : out) v = NAN;  // beta 0 must not read out
    conv_direct(g, c.M, w.data(), CKK, src, 0.0f, out.data());
    for (size_t i = 0; i < out.size(); ++i)
      REQUIRE(out[i] == doctest::Approx(ref[i]).epsilon(1e-5));
    // beta 1 adds onto what is there.
    for (size_t i = 0; i < out.size(); ++i) out[i] = 0.5f * static_cast<float>(i % 7);
    conv_direct(g, c.M, w.data(), CKK, src, 1.0f, out.data());
    for (size_t i = 0; i < out.size(); ++i)
      REQUIRE(out[i] == doctest::Approx(ref[i] + 0.5f * static_cast<float>(i % 7)).epsilon(1e-5));
  }
}

TEST_CASE("conv_direct_weight_grad equals G col^T, transposed") {
  if (!avx512_built()) return rf::test::skip(kNotBuilt);
  struct Case { int64_t C, H, W, K, pad, M; };
  const Case cases[] = {
      {1, 28, 28, 5, 2, 16},  // the CNN's first conv: 25 taps (8 + 8 + 8 + 1), one vector
      {16, 14, 14, 5, 2, 32}, // its second: 400 taps, two vectors
      {3, 7, 9, 3, 1, 21},    // a masked second vector
      {2, 5, 6, 3, 0, 5},     // no padding, a masked single vector
  };
  for (const Case& c : cases) {
    CAPTURE(c.C);
    CAPTURE(c.M);
    const ConvGeometry g{c.C, c.H, c.W, c.K, c.K, 1, c.pad};
    REQUIRE(conv_direct_weight_grad_fits(g, c.M));
    const int64_t P = g.col_cols(), CKK = g.col_rows();
    std::vector<float> x(c.C * c.H * c.W), G(c.M * P), gt(P * c.M), col(CKK * P), pad(g.padded_size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.9f * i + 0.1f);
    for (size_t i = 0; i < G.size(); ++i) G[i] = std::cos(0.23f * i);
    std::vector<float> ref(c.M * CKK), dwt(CKK * c.M);
    im2col(g, x.data(), col.data(), P, pad.data());
    gemm(false, true, c.M, CKK, P, 1.0f, G.data(), P, col.data(), P, 0.0f, ref.data(), CKK);

    transpose(c.M, P, G.data(), gt.data());
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t p = 0; p < P; ++p) REQUIRE(gt[p * c.M + m] == G[m * P + p]);
    const float* src = x.data();
    if (c.pad > 0) {
      pad_image(g, x.data(), pad.data());
      src = pad.data();
    }
    for (float& v : dwt) v = NAN;  // beta 0 must not read dwt
    conv_direct_weight_grad(g, c.M, src, gt.data(), 0.0f, dwt.data());
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t t = 0; t < CKK; ++t)
        REQUIRE(dwt[t * c.M + m] == doctest::Approx(ref[m * CKK + t]).epsilon(1e-5));
    // beta 1: a second sample (the same one) sums onto the first.
    conv_direct_weight_grad(g, c.M, src, gt.data(), 1.0f, dwt.data());
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t t = 0; t < CKK; ++t)
        REQUIRE(dwt[t * c.M + m] == doctest::Approx(2.0 * ref[m * CKK + t]).epsilon(1e-5));
  }
}

TEST_CASE("transpose: rows that are and are not a multiple of 16") {
  for (int64_t rows : {1, 16, 37}) {
    CAPTURE(rows);
    const int64_t cols = 19;
    std::vector<float> a(rows * cols), t(rows * cols);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
    transpose(rows, cols, a.data(), t.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) REQUIRE(t[c * rows + r] == a[r * cols + c]);
  }
}

TEST_CASE("conv_direct refuses what it does not handle") {
  CHECK_FALSE(conv_direct_fits(ConvGeometry{1, 8, 8, 3, 3, 2, 1}));   // stride 2
  CHECK_FALSE(conv_direct_fits(ConvGeometry{1, 8, 40, 3, 3, 1, 1}));  // out_w 40 > 32
  CHECK_FALSE(conv_direct_weight_grad_fits(ConvGeometry{1, 8, 8, 3, 3, 2, 1}, 8));  // stride 2
  CHECK_FALSE(conv_direct_weight_grad_fits(ConvGeometry{1, 8, 8, 3, 3, 1, 1}, 33));  // > 32 channels
}

TEST_CASE("gemm_small equals the naive product across tiles, ragged edges and strides") {
  if (!avx512_built()) return rf::test::skip(kNotBuilt);
  struct Case { bool ta; int64_t M, N, K; };
  for (Case c : {Case{false, 19, 45, 13}, Case{true, 19, 45, 13}, Case{false, 8, 32, 1},
                 Case{true, 17, 16, 40}, Case{false, 3, 70, 7}}) {
    CAPTURE(c.ta);
    CAPTURE(c.M);
    CAPTURE(c.N);
    REQUIRE(gemm_small_fits(false, c.M, c.N, c.K));
    const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K;
    const int64_t lda = ac + 3, ldb = c.N + 5, ldc = c.N + 2;
    std::vector<float> A(ar * lda), B(c.K * ldb), C(c.M * ldc);
    for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.3f * i);
    for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.7f * i);
    for (float beta : {0.0f, 1.0f}) {
      CAPTURE(beta);
      for (size_t i = 0; i < C.size(); ++i) C[i] = beta == 0.0f ? NAN : 0.25f * (i % 5);
      const std::vector<float> before = C;
      gemm_small(c.M, c.N, c.K, 2.0f, A.data(), c.ta ? 1 : lda, c.ta ? lda : 1, B.data(), ldb,
                 beta, C.data(), ldc);
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < ldc; ++n) {
          const float got = C[m * ldc + n], old = before[m * ldc + n];
          if (n >= c.N) {  // the padding columns are not touched
            CHECK((std::isnan(old) ? std::isnan(got) : got == old));
            continue;
          }
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k)
            s += double(c.ta ? A[k * lda + m] : A[m * lda + k]) * B[k * ldb + n];
          REQUIRE(got == doctest::Approx(2.0 * s + (beta == 0.0f ? 0.0 : old)).epsilon(1e-5));
        }
    }
  }
}
