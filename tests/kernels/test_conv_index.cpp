// The CUDA convolution kernels' per-element arithmetic (kernels/cuda/conv_index.h), run on
// the host over every index and checked against the reference table: im2col in both
// column layouts (then the forward and the weight gradient as the kernels' GEMMs compute
// them), col2im, and the one-channel direct forward and weight gradient with their staged
// plane and weights. Needs no GPU; the kernels' thread-to-element loops and staging are
// left to test_kernels_cuda on one.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cuda/conv_index.h"
#include "kernels/reference/table.h"

using namespace rf::kernels;
using namespace rf::kernels::cuda_ops;

namespace {

class NoScratch final : public Scratch {
 public:
  void* get(size_t) override { return nullptr; }
  void put(void*, size_t) override {}
};

struct Problem {
  ConvShape s;
  std::vector<float> x, w, g;  // input, weights, output gradient
  std::vector<float> out, dx, dw;  // the reference's forward (no bias) and gradients
};

struct Geo {
  int64_t batch, c, h, w, oc, kh, kw, stride, pad;
};

const Geo kGeos[] = {
    {2, 3, 12, 12, 8, 5, 5, 1, 2},  {3, 2, 9, 11, 16, 3, 3, 1, 0}, {2, 3, 11, 10, 4, 3, 3, 2, 1},
    {1, 2, 9, 9, 6, 3, 3, 2, 4},    {2, 2, 7, 8, 3, 3, 2, 1, 1},   {2, 3, 5, 6, 5, 1, 1, 1, 2},
    {1, 1, 1, 1, 1, 1, 1, 1, 0},    {3, 1, 28, 28, 16, 5, 5, 1, 2}, {2, 1, 13, 9, 7, 4, 3, 2, 3},
    {2, 1, 10, 10, 19, 3, 5, 1, 0},
};

Problem make(const Geo& q, unsigned seed) {
  const auto [batch, c, h, w, oc, kh, kw, stride, pad] = q;
  Problem p{{{c, h, w, kh, kw, stride, pad}, batch, oc}, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  auto vec = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& f : v) f = uni(rng);
    return v;
  };
  const int64_t P = p.s.g.out_h() * p.s.g.out_w();
  p.x = vec(batch * c * h * w);
  p.w = vec(oc * p.s.g.col_rows());
  p.g = vec(batch * oc * P);
  p.out.assign(static_cast<size_t>(batch * oc * P), 0.0f);
  p.dx.assign(p.x.size(), 0.0f);
  p.dw.assign(p.w.size(), 0.0f);
  NoScratch scratch;
  const Exec e{nullptr, &scratch};
  reference_table().conv2d_forward(e, p.s, p.x.data(), p.w.data(), nullptr, p.out.data());
  reference_table().conv2d_backward(e, p.s, p.x.data(), p.w.data(), p.g.data(), p.dx.data(), false, p.dw.data(),
                                    nullptr);
  return p;
}

// Every element within a float sum's rounding of `terms` terms of the reference.
void check_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t terms, const char* what) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = 1e-6 + 2e-7 * static_cast<double>(terms) + 1e-5 * std::fabs(double{ref[i]});
    if (!(std::fabs(double{got[i]} - ref[i]) <= tol) && bad++ == 0) first = i;
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", ref.size(), " elements off; first at ", first, ": ",
                bad ? got[first] : 0.0f, " vs ", bad ? ref[first] : 0.0f);
}

}  // namespace

TEST_CASE("cuda conv index: im2col in both layouts, then the kernels' GEMMs, equal the reference") {
  unsigned seed = 1;
  for (const Geo& q : kGeos) {
    CAPTURE(q.c);
    CAPTURE(q.h);
    CAPTURE(q.stride);
    CAPTURE(q.pad);
    const Problem p = make(q, seed++);
    const Geo32 g = geo32_unchecked(p.s.g);
    const int nb = static_cast<int>(q.batch), P = g.positions(), CKK = g.rows(), OC = static_cast<int>(q.oc);
    const int total = nb * CKK * P;
    for (ColLayout layout : {ColLayout::kSampleMajor, ColLayout::kRowMajor}) {
      std::vector<float> col(static_cast<size_t>(total));
      for (int i = 0; i < total; ++i) {
        const ColEntry e = col_entry(g, nb, layout, i);
        REQUIRE((e.n >= 0 && e.n < nb && e.row >= 0 && e.row < CKK && e.p >= 0 && e.p < P));
        const int at = layout == ColLayout::kSampleMajor ? (e.n * CKK + e.row) * P + e.p : (e.row * nb + e.n) * P + e.p;
        REQUIRE(at == i);
        const int src = im2col_source(g, e);
        col[static_cast<size_t>(i)] = src >= 0 ? p.x[static_cast<size_t>(src)] : 0.0f;
      }
      if (layout == ColLayout::kSampleMajor) {  // out_n = W col_n, as the batched GEMM
        std::vector<float> out(p.out.size());
        for (int n = 0; n < nb; ++n)
          for (int oc = 0; oc < OC; ++oc)
            for (int pp = 0; pp < P; ++pp) {
              float s = 0.0f;
              for (int r = 0; r < CKK; ++r)
                s += p.w[static_cast<size_t>(oc * CKK + r)] * col[static_cast<size_t>((n * CKK + r) * P + pp)];
              out[static_cast<size_t>((n * OC + oc) * P + pp)] = s;
            }
        check_close(out, p.out, CKK, "forward, sample-major columns");
      } else {  // dW = Gt col^T over K = nb*P, Gt[oc, n*P + p] = G[n, oc, p]
        std::vector<float> dw(p.dw.size());
        for (int oc = 0; oc < OC; ++oc)
          for (int r = 0; r < CKK; ++r) {
            float s = 0.0f;
            for (int n = 0; n < nb; ++n)
              for (int pp = 0; pp < P; ++pp)
                s += p.g[static_cast<size_t>((n * OC + oc) * P + pp)] * col[static_cast<size_t>((r * nb + n) * P + pp)];
            dw[static_cast<size_t>(oc * CKK + r)] = s;
          }
        check_close(dw, p.dw, nb * P, "weight gradient, row-major columns");
      }
    }
  }
}

TEST_CASE("cuda conv index: col2im over the sample-major column gradient equals the reference's input gradient") {
  unsigned seed = 100;
  for (const Geo& q : kGeos) {
    CAPTURE(q.c);
    CAPTURE(q.h);
    CAPTURE(q.stride);
    CAPTURE(q.pad);
    const Problem p = make(q, seed++);
    const Geo32 g = geo32_unchecked(p.s.g);
    const int nb = static_cast<int>(q.batch), P = g.positions(), CKK = g.rows(), OC = static_cast<int>(q.oc);
    std::vector<float> dcol(static_cast<size_t>(nb * CKK * P));  // dcol_n = W^T G_n
    for (int n = 0; n < nb; ++n)
      for (int r = 0; r < CKK; ++r)
        for (int pp = 0; pp < P; ++pp) {
          float s = 0.0f;
          for (int oc = 0; oc < OC; ++oc)
            s += p.w[static_cast<size_t>(oc * CKK + r)] * p.g[static_cast<size_t>((n * OC + oc) * P + pp)];
          dcol[static_cast<size_t>((n * CKK + r) * P + pp)] = s;
        }
    std::vector<float> dx(p.dx.size());
    for (int i = 0; i < nb * g.in_plane(); ++i) dx[static_cast<size_t>(i)] = col2im_sum(g, dcol.data(), i);
    check_close(dx, p.dx, OC * q.kh * q.kw, "input gradient");
  }
}

TEST_CASE("cuda conv index: the one-channel direct forward and weight gradient equal the reference") {
  unsigned seed = 200;
  for (const Geo& q : kGeos) {
    if (q.c != 1 || q.kw > kDirectMaxKw) continue;
    CAPTURE(q.h);
    CAPTURE(q.w);
    CAPTURE(q.oc);
    CAPTURE(q.stride);
    CAPTURE(q.pad);
    const Problem p = make(q, seed++);
    const OneChannel d = one_channel_unchecked(geo32_unchecked(p.s.g), static_cast<int>(q.oc));
    const int KK = d.g.kh * d.g.kw, P = d.g.positions();
    REQUIRE(d.hs <= d.g.h + 2 * d.g.pad);
    REQUIRE(d.ws <= d.g.w + 2 * d.g.pad);
    std::vector<Quad> wt(static_cast<size_t>(KK * d.ocq));
    for (int tap = 0; tap < KK; ++tap)
      for (int oc = 0; oc < d.ocq * 4; ++oc)
        wt[static_cast<size_t>(tap * d.ocq + oc / 4)].v[oc % 4] = staged_weight(d, p.w.data(), tap, oc);
    std::vector<float> out(p.out.size());
    std::vector<Quad> dw_acc(static_cast<size_t>(d.g.kh * d.ocq * kDirectMaxKw), Quad{});
    for (int n = 0; n < static_cast<int>(q.batch); ++n) {
      const float* xn = p.x.data() + n * d.g.h * d.g.w;
      std::vector<float> xs(static_cast<size_t>(d.hs * d.ws));
      for (int r = 0; r < d.hs; ++r)
        for (int t = 0; t < d.ws; ++t) xs[static_cast<size_t>(r * d.ws + t)] = staged_input(d, xn, r, t);
      for (int pp = 0; pp < P; ++pp) {
        for (int q0 = 0; q0 < d.ocq; q0 += 4) {
          Quad acc[4];
          direct_forward_sums(d, xs.data(), wt.data(), pp, q0, acc);
          for (int j = 0; j < 4 && q0 + j < d.ocq; ++j)
            for (int l = 0; l < 4; ++l) {
              const int oc = (q0 + j) * 4 + l;
              if (oc < d.oc) out[static_cast<size_t>((n * d.oc + oc) * P + pp)] = acc[j].v[l];
            }
        }
        for (int kh = 0; kh < d.g.kh; ++kh)
          for (int qq = 0; qq < d.ocq; ++qq) {
            Quad gq{};
            for (int l = 0; l < 4; ++l) {
              const int oc = qq * 4 + l;
              gq.v[l] = oc < d.oc ? p.g[static_cast<size_t>((n * d.oc + oc) * P + pp)] : 0.0f;
            }
            direct_wgrad_terms(d, xs.data(), staged_origin(d, pp), kh, gq,
                               &dw_acc[static_cast<size_t>((kh * d.ocq + qq) * kDirectMaxKw)]);
          }
      }
    }
    check_close(out, p.out, KK, "one-channel forward");
    std::vector<float> dw(p.dw.size());
    for (int oc = 0; oc < d.oc; ++oc)
      for (int kh = 0; kh < d.g.kh; ++kh)
        for (int kw = 0; kw < d.g.kw; ++kw)
          dw[static_cast<size_t>(oc * KK + kh * d.g.kw + kw)] =
              dw_acc[static_cast<size_t>((kh * d.ocq + oc / 4) * kDirectMaxKw + kw)].v[oc % 4];
    check_close(dw, p.dw, q.batch * P, "one-channel weight gradient");
  }
}
