// GEMM through Eigen against a naive triple loop, for every transpose case, strides
// (sub-matrices), and alpha/beta.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.h"

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
        for (size_t i = 0; i < C.size(); ++i) C[i] = R[i] = 0.25f * (i % 5);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += double(ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
            R[m * ldc + n] = float(2.0 * s + beta * R[m * ldc + n]);
          }
        gemm(ta, tb, M, N, K, 2.0f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < ldc; ++n) {
            if (n < N) CHECK(C[m * ldc + n] == doctest::Approx(R[m * ldc + n]).epsilon(1e-5));
            else CHECK(C[m * ldc + n] == R[m * ldc + n]);  // padding untouched
          }
      }
}
