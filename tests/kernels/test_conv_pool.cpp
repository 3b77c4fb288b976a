// im2col + GEMM against a direct convolution; col2im as the adjoint of im2col;
// max pooling's tie rule.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/pool.h"

using namespace rf::kernels::cpu;

TEST_CASE("im2col + gemm equals a direct convolution") {
  for (int64_t stride : {1, 2})
    for (int64_t pad : {0, 1, 2}) {
      CAPTURE(stride);
      CAPTURE(pad);
      ConvGeometry g{2, 6, 7, 3, 3, stride, pad};
      const int64_t OC = 3, OH = g.out_h(), OW = g.out_w();
      std::vector<float> x(2 * 6 * 7), w(OC * g.col_rows()), col(g.col_rows() * g.col_cols());
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.3f * i);
      for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.4f * i);
      std::vector<float> y(OC * OH * OW), padbuf(g.padded_size());
      im2col(g, x.data(), col.data(), OH * OW, padbuf.data());
      gemm(false, false, OC, OH * OW, g.col_rows(), 1.0f, w.data(), g.col_rows(), col.data(),
           OH * OW, 0.0f, y.data(), OH * OW);
      for (int64_t o = 0; o < OC; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double s = 0;
            for (int64_t c = 0; c < 2; ++c)
              for (int64_t kh = 0; kh < 3; ++kh)
                for (int64_t kw = 0; kw < 3; ++kw) {
                  const int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                  if (ih < 0 || ih >= 6 || iw < 0 || iw >= 7) continue;
                  s += double(x[(c * 6 + ih) * 7 + iw]) * w[((o * 2 + c) * 3 + kh) * 3 + kw];
                }
            CHECK(y[(o * OH + oh) * OW + ow] == doctest::Approx(s).epsilon(1e-5));
          }
    }
}

TEST_CASE("col2im is the adjoint of im2col: <im2col(x), c> == <x, col2im(c)>") {
  ConvGeometry g{3, 5, 5, 3, 2, 2, 1};
  std::vector<float> x(3 * 25), c(g.col_rows() * g.col_cols()), col(c.size()), back(x.size(), 0.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.9f * i);
  for (size_t i = 0; i < c.size(); ++i) c[i] = std::cos(0.2f * i);
  std::vector<float> pad(g.padded_size());
  im2col(g, x.data(), col.data(), g.col_cols(), pad.data());
  col2im(g, c.data(), g.col_cols(), back.data(), pad.data(), true);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < c.size(); ++i) lhs += double(col[i]) * c[i];
  for (size_t i = 0; i < x.size(); ++i) rhs += double(x[i]) * back[i];
  CHECK(lhs == doctest::Approx(rhs).epsilon(1e-5));
}

TEST_CASE("max_pool2d picks the first maximum and routes the gradient there") {
  PoolGeometry g{1, 2, 4, 2, 2};
  std::vector<float> x{1, 5, 2, 2,
                       5, 3, 2, 0};
  std::vector<float> y(2);
  std::vector<int32_t> idx(2);
  max_pool2d(g, x.data(), y.data(), idx.data());
  CHECK(y == std::vector<float>{5, 2});
  CHECK(idx == std::vector<int32_t>{1, 2});
  std::vector<float> dx(8, 0.0f), dy{1.5f, -2.0f};
  max_pool2d_backward(g, dy.data(), idx.data(), dx.data(), true);
  CHECK(dx == std::vector<float>{0, 1.5f, -2.0f, 0, 0, 0, 0, 0});
}

TEST_CASE("max_pool2d_backward: overwrite mode equals zero-then-accumulate, tiled or not") {
  // 4 x {6, 28, 40} tile exactly (the vector path: masked tails and full 16-window rows);
  // 5 x 6 and 4 x 7 do not (zero, then scatter).
  for (auto [h, w] : {std::pair<int64_t, int64_t>{4, 6}, {4, 28}, {4, 40}, {5, 6}, {4, 7}}) {
    CAPTURE(h);
    CAPTURE(w);
    PoolGeometry g{3, h, w, 2, 2};
    const int64_t outs = g.planes * g.out_h() * g.out_w();
    std::vector<float> x(g.planes * h * w), y(outs), dy(outs);
    std::vector<int32_t> idx(outs);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(2.1f * i);
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = 1.0f + i;
    max_pool2d(g, x.data(), y.data(), idx.data());
    std::vector<float> ref(x.size(), 0.0f), over(x.size(), 42.0f);
    max_pool2d_backward(g, dy.data(), idx.data(), ref.data(), true);
    max_pool2d_backward(g, dy.data(), idx.data(), over.data(), false);
    CHECK(over == ref);
  }
}

TEST_CASE("im2col with padding zeroes every tap outside the image, whatever the scratch held") {
  ConvGeometry g{2, 3, 4, 3, 3, 1, 2};
  std::vector<float> x(2 * 3 * 4, 1.0f), col(g.col_rows() * g.col_cols()), pad(g.padded_size(), 7.0f);
  im2col(g, x.data(), col.data(), g.col_cols(), pad.data());
  for (float v : col) CHECK((v == 0.0f || v == 1.0f));
  // The centre tap of output (0, 0) reads input (-1, -1): padding.
  const int64_t centre = (0 * 3 + 1) * 3 + 1;
  CHECK(col[centre * g.col_cols()] == 0.0f);
}

TEST_CASE("2x2 max pooling fast path == the generic window loop, with ties and NaNs") {
  // Widths give full 16-output rows, masked tails and odd sizes (the last column unused).
  for (int64_t w : {4, 5, 14, 28, 33, 40}) {
    CAPTURE(w);
    const int64_t h = 6;
    PoolGeometry g{3, h, w, 2, 2};
    const int64_t outs = g.planes * g.out_h() * g.out_w();
    std::vector<float> x(g.planes * h * w);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::round(3.0f * std::sin(1.7f * i));  // many ties
    x[5] = std::nanf("");
    x[w + 7] = std::nanf("");
    std::vector<float> y(outs);
    std::vector<int32_t> idx(outs);
    max_pool2d(g, x.data(), y.data(), idx.data());
    for (int64_t p = 0; p < g.planes; ++p)
      for (int64_t oh = 0; oh < g.out_h(); ++oh)
        for (int64_t ow = 0; ow < g.out_w(); ++ow) {
          const float* in = x.data() + p * h * w;
          int64_t best = 2 * oh * w + 2 * ow;
          for (int64_t kh = 0; kh < 2; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw) {
              const int64_t i = (2 * oh + kh) * w + 2 * ow + kw;
              if (in[i] > in[best] || std::isnan(in[i])) best = i;
            }
          const int64_t o = (p * g.out_h() + oh) * g.out_w() + ow;
          CHECK(idx[o] == best);
          if (std::isnan(in[best])) CHECK(std::isnan(y[o]));
          else CHECK(y[o] == in[best]);
        }
  }
}
