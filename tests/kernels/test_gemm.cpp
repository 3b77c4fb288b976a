// gemm() (whichever kernel it routes to) against a naive triple loop, for every transpose
// case, strides (sub-matrices), and alpha/beta; gemm_packed against a double reference on
// every blocking boundary and the models' shapes; same bits for any thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_packed.h"
#include "tests/skip.h"

using rf::kernels::cpu::gemm;

TEST_CASE("gemm matches the naive product in all transpose cases") {
  const int64_t M = 7, N = 5, K = 9;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 1.0f}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(beta);
        // Stored with an extra column of padding to check the leading dimensions.
        const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        const int64_t lda = ac + 1, ldb = bc + 2, ldc = N + 3;
        std::vector<float> A(ar * lda), B(br * ldb), C(M * ldc), R(M * ldc);
        for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.3f * i);
        for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.7f * i);
        // beta 0 must not read C: its elements (not the padding) start as NaN then.
        for (size_t i = 0; i < C.size(); ++i)
          C[i] = R[i] = beta == 0.0f && int64_t(i % ldc) < N ? std::nanf("") : 0.25f * (i % 5);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += double(ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
            R[m * ldc + n] = float(2.0 * s + (beta == 0.0f ? 0.0 : beta * R[m * ldc + n]));
          }
        gemm(ta, tb, M, N, K, 2.0f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < ldc; ++n) {
            if (n < N) CHECK(C[m * ldc + n] == doctest::Approx(R[m * ldc + n]).epsilon(1e-5));
            else CHECK(C[m * ldc + n] == R[m * ldc + n]);  // padding untouched
          }
      }
}

// ---- gemm_packed (gemm_packed.h): the packed AVX-512 GEMM, against a double reference ----

namespace {

using rf::kernels::cpu::gemm_packed;

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  int64_t pad = 3;  // extra columns in every stored matrix (leading dim > width)
};

// Fills the stored matrices, runs gemm_packed with `threads`, checks C against a double
// reference (relative to the sum of |terms|, so cancellation does not fail it) and that the
// padding columns of C kept their sentinel. Returns C (padding included) for bit checks.
std::vector<float> check_packed(const Case& c, int threads = 1) {
  const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K;
  const int64_t br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
  const int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.N + c.pad;
  std::vector<float> A(ar * lda), B(br * ldb), C(c.M * ldc);
  for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
  for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.11f * static_cast<float>(i));
  const float sentinel = -777.0f;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < ldc; ++n)
      C[m * ldc + n] = n >= c.N ? sentinel
                       : c.beta == 0.0f ? std::nanf("")
                                        : 0.5f + 0.01f * static_cast<float>((m * 7 + n) % 13);
  const std::vector<float> C0 = C;
  gemm_packed(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, C.data(),
              ldc, threads);
  int64_t bad = 0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < ldc; ++n) {
      const float got = C[m * ldc + n];
      if (n >= c.N) {
        if (!(got == sentinel)) ++bad;
        continue;
      }
      double s = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double t = double(c.ta ? A[k * lda + m] : A[m * lda + k]) *
                         double(c.tb ? B[n * ldb + k] : B[k * ldb + n]);
        s += t;
        mag += std::fabs(t);
      }
      double want = double(c.alpha) * s, tol = 1e-5 * std::fabs(c.alpha) * mag + 1e-6;
      if (c.beta != 0.0f) {
        want += double(c.beta) * C0[m * ldc + n];
        tol += 1e-6 * std::fabs(double(c.beta) * C0[m * ldc + n]);
      }
      if (!(std::fabs(got - want) <= tol)) {
        if (bad < 5)
          MESSAGE("C(", m, ",", n, ") = ", got, ", want ", want, " (tolerance ", tol, ")");
        ++bad;
      }
    }
  CAPTURE(c.ta);
  CAPTURE(c.tb);
  CAPTURE(c.M);
  CAPTURE(c.N);
  CAPTURE(c.K);
  CAPTURE(c.alpha);
  CAPTURE(c.beta);
  CHECK(bad == 0);
  return C;
}

}  // namespace

TEST_CASE("gemm_packed: every transpose case with alpha, beta 0 over NaN, beta 1 and 0.5") {
  if (!rf::kernels::cpu::gemm_packed_available())
    return rf::test::skip("gemm_packed is not built here (no AVX-512): gemm() never uses it");
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 1.0f, 0.5f})
        for (float alpha : {1.0f, -1.5f}) check_packed({bool(ta), bool(tb), 37, 45, 53, alpha, beta});
}

TEST_CASE("gemm_packed: ragged sizes around every blocking boundary") {
  if (!rf::kernels::cpu::gemm_packed_available())
    return rf::test::skip("gemm_packed is not built here (no AVX-512): gemm() never uses it");
  // MR = 12, NR = 32, the 16-wide transposes, MC = 144, KC = 384, NC = 512.
  for (int64_t M : {1, 11, 12, 13, 143, 144, 145})
    for (int tb = 0; tb < 2; ++tb) {
      check_packed({false, bool(tb), M, 33, 17, 1.0f, 0.0f});
      check_packed({true, bool(tb), M, 33, 17, 1.0f, 1.0f});
    }
  for (int64_t N : {1, 15, 16, 17, 31, 32, 33, 511, 512, 513})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) check_packed({bool(ta), bool(tb), 13, N, 19, 1.0f, 0.0f});
  for (int64_t K : {1, 15, 16, 17, 383, 384, 385, 769})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) check_packed({bool(ta), bool(tb), 14, 34, K, 1.0f, 1.0f});
  check_packed({false, true, 145, 513, 385, 0.75f, 0.0f, 0});  // every boundary at once, no padding
  check_packed({true, false, 145, 513, 385, 1.0f, 1.0f, 5});
}

TEST_CASE("gemm_packed: the MLP and CNN shapes") {
  if (!rf::kernels::cpu::gemm_packed_available())
    return rf::test::skip("gemm_packed is not built here (no AVX-512): gemm() never uses it");
  const Case shapes[] = {
      {false, true, 128, 512, 784, 1, 0},  {false, true, 128, 512, 512, 1, 0},
      {false, true, 128, 10, 512, 1, 0},   {false, false, 128, 784, 512, 1, 0},
      {false, false, 128, 512, 512, 1, 1}, {true, false, 512, 784, 128, 1, 0},
      {true, false, 512, 512, 128, 1, 1},  {true, false, 10, 512, 128, 1, 0},
      {false, true, 64, 512, 784, 1, 0},   {true, false, 512, 784, 64, 1, 1},
      {false, true, 128, 128, 1568, 1, 0}, {false, false, 128, 1568, 128, 1, 0},
      {true, false, 128, 1568, 128, 1, 1},
  };
  for (const Case& c : shapes) check_packed(c);
}

TEST_CASE("gemm_packed: bitwise the same on a repeat and for 1, 2 and 3 threads") {
  if (!rf::kernels::cpu::gemm_packed_available())
    return rf::test::skip("gemm_packed is not built here (no AVX-512): gemm() never uses it");
  for (const Case& c : {Case{false, true, 128, 517, 785, 1, 0}, Case{true, false, 61, 300, 128, 1, 1},
                        Case{false, false, 50, 97, 400, -2, 0.5f}}) {
    const std::vector<float> one = check_packed(c, 1);
    CHECK(std::memcmp(one.data(), check_packed(c, 1).data(), one.size() * sizeof(float)) == 0);
    for (int threads : {2, 3})
      CHECK(std::memcmp(one.data(), check_packed(c, threads).data(), one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("gemm routes by shape only: 1 and 2 threads give the same bits") {
  using rf::kernels::cpu::num_threads;
  using rf::kernels::cpu::set_num_threads;
  const int before = num_threads();
  // The MLP's forward (NT, gemm_packed), input gradient (NN, gemm_small), weight gradient
  // (TN, gemm_small), a TT product, one past gemm_small's size limit (gemm_packed) and the
  // narrow NT/TT products (the logits: gemm_small on a transposed copy of B; Eigen's
  // blocking, used before, depends on its thread count), also past 64M (gemm_packed).
  struct S {
    bool ta, tb;
    int64_t M, N, K;
    float beta;
  };
  for (const S s : {S{false, true, 128, 512, 784, 0}, S{false, false, 128, 784, 512, 1},
                    S{true, false, 512, 784, 128, 0}, S{true, true, 100, 300, 200, 0},
                    S{true, false, 512, 1024, 160, 1}, S{false, true, 128, 10, 512, 0},
                    S{true, true, 70, 10, 128, 1}, S{false, true, 7000, 10, 1000, 0}}) {
    CAPTURE(s.ta);
    CAPTURE(s.tb);
    CAPTURE(s.M);
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<float> A(s.M * s.K), B(s.N * s.K), C1(s.M * s.N), C2(s.M * s.N);
    for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.11f * static_cast<float>(i));
    for (size_t i = 0; i < C1.size(); ++i) C1[i] = C2[i] = 0.1f * static_cast<float>(i % 7);
    set_num_threads(1);
    gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, s.beta, C1.data(), s.N);
    set_num_threads(2);
    gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, s.beta, C2.data(), s.N);
    set_num_threads(before);
    CHECK(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)) == 0);
  }
}
