// The oracle's checks (oracle_checks.h): every entry of a table against the reference
// table (kernels/reference), on fresh random inputs and shapes drawn to hit the edges:
// sizes of 1, odd sizes, 1x1 matrices, every transpose case, padding wider than the kernel,
// strides 1 and 2, convolutions inside and outside the CPU's direct route, accumulate on
// and off, null optional outputs. A table is checked entry by entry and the run fails
// unless every one of kOpTableEntries was checked, so a new entry cannot go without a check.
#include "tests/kernels/oracle_checks.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cpu/conv_direct.h"
#include "kernels/op_table.h"
#include "kernels/reference/table.h"

namespace rf::kernels::oracle {

namespace {

int64_t elementwise_size(Rng& r) {
  const int64_t fixed[] = {1, 2, 7, 16, 17, 33, 1000};
  return r.coin() ? fixed[r.range(0, 6)] : r.range(1, 5000);
}

// ---- the checks, one group of entries each ----

void check_memory(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::fill);
  c.mark(&OpTable::copy);
  c.mark(&OpTable::copy_i32);
  c.mark(&OpTable::accumulate);
  c.mark(&OpTable::divide_by);
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t n = elementwise_size(r);
    CAPTURE(n);
    const float value = rep == 0 ? 0.0f : r.uni(-10.0f, 10.0f);
    {
      Case k;
      const int o = k.out(garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.fill(e, n, value, p.f[o]); });
    }
    {
      Case k;
      const int x = k.in(r.vec(n)), y = k.out(garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.copy(e, n, p.f[x], p.f[y]); });
    }
    {
      Case k;
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (auto& e : v) e = static_cast<int32_t>(r.range(-1000000, 1000000));
      const int x = k.in_i32(v), y = k.out_i32(std::vector<int32_t>(static_cast<size_t>(n), -7));
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.copy_i32(e, n, p.i[x], p.i[y]); });
    }
    for (bool acc : {false, true}) {
      CAPTURE(acc);
      Case k;
      const int g = k.in(r.vec(n)), d = k.out(acc ? r.vec(n) : garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.accumulate(e, n, p.f[g], p.f[d], acc); });
    }
    {
      Case k;
      const int d = k.in({r.uni(1.0f, 300.0f)}), x = k.out(r.vec(n, -100.0f, 100.0f), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.divide_by(e, n, p.f[d], p.f[x]); });
    }
  }
}

void check_matmul(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::matmul_forward);
  c.mark(&OpTable::matmul_backward);
  struct Mnk {
    int64_t m, n, k;
  };
  std::vector<Mnk> shapes = {{1, 1, 1}, {1, 37, 5}, {13, 1, 9}, {7, 5, 1}, {64, 100, 300}, {33, 17, 65}};
  for (int i = 0; i < 6; ++i) shapes.push_back({r.range(1, 70), r.range(1, 70), r.range(1, 70)});
  for (const Mnk& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        CAPTURE(ta);
        CAPTURE(tb);
        // A is stored [M, K] or [K, M], B [K, N] or [N, K], contiguous.
        const MatmulShape ms{s.m, s.n, s.k, ta == 1, tb == 1, ta ? s.m : s.k, tb ? s.k : s.n};
        {
          Case k;
          const int a = k.in(r.vec(s.m * s.k)), b = k.in(r.vec(s.k * s.n));
          const int o = k.out(garbage(s.m * s.n), sum_tol(s.k));
          k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
            T.matmul_forward(e, ms, p.f[a], p.f[b], p.f[o]);
          });
        }
        const int want = static_cast<int>(r.range(0, 2));  // both, only da, only db
        const float beta_a = r.coin() ? 1.0f : 0.0f, beta_b = r.coin() ? 1.0f : 0.0f;
        CAPTURE(want);
        CAPTURE(beta_a);
        CAPTURE(beta_b);
        Case k;
        const int a = k.in(r.vec(s.m * s.k)), b = k.in(r.vec(s.k * s.n)), g = k.in(r.vec(s.m * s.n));
        const int da = want == 2 ? k.null()
                                 : k.out(beta_a == 1.0f ? r.vec(s.m * s.k) : garbage(s.m * s.k), sum_tol(s.n));
        const int db = want == 1 ? k.null()
                                 : k.out(beta_b == 1.0f ? r.vec(s.k * s.n) : garbage(s.k * s.n), sum_tol(s.m));
        k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
          T.matmul_backward(e, ms, p.f[a], p.f[b], p.f[g], p.f[da], beta_a, p.f[db], beta_b);
        });
      }
}

void check_elementwise(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::add_forward);
  c.mark(&OpTable::mul_forward);
  c.mark(&OpTable::mul_backward);
  c.mark(&OpTable::sum_forward);
  c.mark(&OpTable::sum_backward);
  c.mark(&OpTable::relu_forward);
  c.mark(&OpTable::relu_backward);
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t n = elementwise_size(r);
    CAPTURE(n);
    {
      Case k;
      const int a = k.in(r.vec(n)), b = k.in(r.vec(n)), o = k.out(garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.add_forward(e, n, p.f[a], p.f[b], p.f[o]); });
    }
    {
      Case k;
      const int a = k.in(r.vec(n)), b = k.in(r.vec(n)), o = k.out(garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.mul_forward(e, n, p.f[a], p.f[b], p.f[o]); });
    }
    for (int want = 0; want < 3; ++want) {  // both, only da, only db
      CAPTURE(want);
      Case k;
      const int a = k.in(r.vec(n)), b = k.in(r.vec(n)), g = k.in(r.vec(n));
      // d + g * b may be one fused multiply-add or two roundings: within an ulp or so.
      const int da = want == 2 ? k.null() : k.out(r.vec(n), kUlps);
      const int db = want == 1 ? k.null() : k.out(r.vec(n), kUlps);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.mul_backward(e, n, p.f[a], p.f[b], p.f[g], p.f[da], p.f[db]);
      });
    }
    {
      Case k;
      const int x = k.in(r.vec(n)), o = k.out(garbage(1), {1e-6, 1e-6});
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.sum_forward(e, n, p.f[x], p.f[o]); });
    }
    {
      Case k;
      const int g = k.in({r.uni()}), d = k.out(r.vec(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.sum_backward(e, n, p.f[g], p.f[d]); });
    }
    {
      Case k;
      std::vector<float> x = r.vec(n);
      x[0] = 0.0f;  // the gradient at 0 is 0
      const int xi = k.in(x), o = k.out(garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.relu_forward(e, n, p.f[xi], p.f[o]); });
    }
    for (bool acc : {false, true}) {
      CAPTURE(acc);
      Case k;
      std::vector<float> out = r.vec(n, -0.5f, 1.0f);
      for (float& v : out) v = v < 0.0f ? 0.0f : v;  // a relu's output: zeros and positives
      const int o = k.in(out), g = k.in(r.vec(n)), d = k.out(acc ? r.vec(n) : garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.relu_backward(e, n, p.f[o], p.f[g], p.f[d], acc);
      });
    }
  }
}

void check_bias(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::bias_forward);
  c.mark(&OpTable::bias_backward);
  for (int rep = 0; rep < 8; ++rep) {
    const bool per_channel = rep % 2 == 1;
    const int64_t rows = rep < 2 ? 1 : r.range(1, 40), cols = rep < 4 ? r.range(1, 3) : r.range(1, 70);
    const int64_t plane = per_channel ? (rep == 3 ? 1 : r.range(1, 200)) : 1;
    const BiasShape s{rows, cols, plane, per_channel};
    CAPTURE(rows);
    CAPTURE(cols);
    CAPTURE(plane);
    CAPTURE(per_channel);
    const int64_t n = rows * cols * plane;
    {
      Case k;
      const int x = k.in(r.vec(n)), b = k.in(r.vec(cols)), o = k.out(garbage(n), kExact);
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.bias_forward(e, s, p.f[x], p.f[b], p.f[o]); });
    }
    Case k;
    const int g = k.in(r.vec(n)), db = k.out(r.vec(cols), sum_tol(rows * plane));
    k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) { T.bias_backward(e, s, p.f[g], p.f[db]); });
  }
}

void check_conv(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::conv2d_forward);
  c.mark(&OpTable::conv2d_backward);
  struct Geo {
    int64_t batch, c, h, w, oc, kh, kw, stride, pad;
  };
  std::vector<Geo> geos = {
      {1, 1, 1, 1, 1, 1, 1, 1, 0},     // 1x1 everything
      {2, 3, 12, 12, 8, 5, 5, 1, 2},   // direct route (stride 1, out_w <= 32), padded
      {3, 2, 9, 11, 16, 3, 3, 1, 0},   // direct route, no padding, odd sizes
      {1, 4, 7, 7, 33, 3, 3, 1, 1},    // direct forward, 33 channels: no direct weight grad
      {2, 3, 5, 6, 5, 1, 1, 1, 2},     // padding 2 > kernel 1
      {1, 2, 4, 5, 3, 3, 3, 1, 4},     // padding 4 > kernel 3
      {2, 3, 11, 10, 4, 3, 3, 2, 1},   // stride 2: im2col + GEMM
      {1, 2, 9, 9, 6, 3, 3, 2, 4},     // stride 2, padding > kernel
      {1, 2, 6, 40, 4, 3, 3, 1, 1},    // out_w 40 > 32: im2col + GEMM at stride 1
      {2, 2, 7, 8, 3, 3, 2, 1, 1},     // non-square kernel: no direct input gradient
      {1, 1, 28, 28, 16, 5, 5, 1, 2},  // the CNN's first convolution, one sample
      // One input channel: CUDA's direct kernels (kernels/cuda/conv_direct.h) where they fit
      {5, 1, 28, 28, 16, 5, 5, 1, 2},   // the CNN's first convolution
      {301, 1, 8, 9, 5, 3, 3, 2, 1},    // 151 weight-gradient groups of 2 samples, the last of 1
      {3, 1, 11, 10, 19, 4, 3, 2, 0},   // 19 channels: two groups of quads, the last one short
      {2, 1, 12, 12, 3, 9, 9, 1, 4},    // KW 9 > 8: direct forward, im2col weight gradient
      {2, 1, 120, 120, 2, 3, 3, 1, 1},  // a plane too big for shared memory: im2col throughout
      // CUDA's weight gradient cut along K into slices (kernels/cuda/blas.h): one chunk of
      // samples, then several, the last one short (24 MiB of columns hold 20 samples of the
      // second and 24 of the third), each adding to the slices
      {16, 2, 28, 28, 4, 5, 5, 1, 2},
      {64, 16, 28, 28, 8, 5, 5, 1, 2},
      {40, 32, 40, 40, 2, 5, 5, 2, 0},
  };
  for (int i = 0; i < 4; ++i) {
    const int64_t k = r.range(1, 4);
    geos.push_back({r.range(1, 3), r.range(1, 4), r.range(k, 14), r.range(k, 14), r.range(1, 20), k, k,
                    r.range(1, 2), r.range(0, 4)});
  }
  for (const Geo& q : geos) {
    const ConvGeometry g{q.c, q.h, q.w, q.kh, q.kw, q.stride, q.pad};
    const ConvShape s{g, q.batch, q.oc};
    CAPTURE(q.batch);
    CAPTURE(q.c);
    CAPTURE(q.h);
    CAPTURE(q.w);
    CAPTURE(q.oc);
    CAPTURE(q.kh);
    CAPTURE(q.kw);
    CAPTURE(q.stride);
    CAPTURE(q.pad);
    const bool direct = rf::kernels::cpu::conv_direct_fits(g);
    CAPTURE(direct);
    const int64_t xs = q.batch * q.c * q.h * q.w, ws = q.oc * g.col_rows(), os = q.batch * q.oc * g.out_h() * g.out_w();
    for (bool with_bias : {true, false}) {
      CAPTURE(with_bias);
      Case k;
      const int x = k.in(r.vec(xs)), w = k.in(r.vec(ws)), b = with_bias ? k.in(r.vec(q.oc)) : k.null();
      const int o = k.out(garbage(os), sum_tol(g.col_rows() + 1));
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.conv2d_forward(e, s, p.f[x], p.f[w], p.f[b], p.f[o]);
      });
    }
    for (int variant = 0; variant < 4; ++variant) {
      // 0: all three, dx overwritten; 1: all three, dx accumulated; 2: no dx; 3: only dx.
      const bool acc = variant == 1 || r.coin();
      CAPTURE(variant);
      CAPTURE(acc);
      Case k;
      const int x = k.in(r.vec(xs)), w = k.in(r.vec(ws)), g_ = k.in(r.vec(os));
      const int dx = variant == 2 ? k.null() : k.out(acc ? r.vec(xs) : garbage(xs), sum_tol(q.oc * q.kh * q.kw));
      const int dw = variant == 3 ? k.null() : k.out(r.vec(ws), sum_tol(q.batch * g.out_h() * g.out_w()));
      const int db = variant >= 2 ? k.null() : k.out(r.vec(q.oc), sum_tol(q.batch * g.out_h() * g.out_w()));
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.conv2d_backward(e, s, p.f[x], p.f[w], p.f[g_], p.f[dx], acc, p.f[dw], p.f[db]);
      });
    }
  }
}

void check_pool(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::max_pool2d_forward);
  c.mark(&OpTable::max_pool2d_backward);
  struct Geo {
    int64_t planes, h, w, kernel, stride;
  };
  std::vector<Geo> geos = {{1, 1, 1, 1, 1}, {3, 28, 28, 2, 2}, {2, 7, 9, 2, 2}, {4, 9, 9, 3, 2},
                           {2, 8, 7, 3, 1}, {1, 5, 5, 5, 1},   {3, 14, 15, 2, 1}};
  for (int i = 0; i < 4; ++i) {
    const int64_t k = r.range(1, 4);
    geos.push_back({r.range(1, 5), r.range(k, 20), r.range(k, 20), k, r.range(1, 3)});
  }
  for (const Geo& q : geos)
    for (bool ties : {false, true}) {
      const PoolGeometry g{q.planes, q.h, q.w, q.kernel, q.stride};
      CAPTURE(q.planes);
      CAPTURE(q.h);
      CAPTURE(q.w);
      CAPTURE(q.kernel);
      CAPTURE(q.stride);
      CAPTURE(ties);
      const int64_t in = q.planes * q.h * q.w, outs = q.planes * g.out_h() * g.out_w();
      std::vector<float> x = r.vec(in);
      if (ties)  // few distinct values: ties go to the first in scan order
        for (float& v : x) v = std::round(v * 2.0f);
      {
        Case k;
        const int xi = k.in(x), o = k.out(garbage(outs), kExact);
        const int a = k.out_i32(std::vector<int32_t>(static_cast<size_t>(outs), -1));
        k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
          T.max_pool2d_forward(e, g, p.f[xi], p.f[o], p.i[a]);
        });
      }
      // Backward with the reference's winners (valid indices; overlapping windows when
      // stride < kernel send several outputs to one input).
      std::vector<float> out(static_cast<size_t>(outs));
      std::vector<int32_t> argmax(static_cast<size_t>(outs));
      HostMemory host;
      reference_table().max_pool2d_forward(host.exec(), g, x.data(), out.data(), argmax.data());
      for (bool acc : {false, true}) {
        CAPTURE(acc);
        Case k;
        const int gi = k.in(r.vec(outs)), a = k.in_i32(argmax);
        const int dx = k.out(acc ? r.vec(in) : garbage(in), sum_tol(q.kernel * q.kernel));
        k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
          T.max_pool2d_backward(e, g, p.f[gi], p.i[a], p.f[dx], acc);
        });
      }
    }
}

void check_loss(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::log_softmax_forward);
  c.mark(&OpTable::log_softmax_backward);
  c.mark(&OpTable::nll_forward);
  c.mark(&OpTable::nll_backward);
  struct RC {
    int64_t rows, cols;
  };
  std::vector<RC> shapes = {{1, 1}, {1, 10}, {7, 1}, {128, 10}, {3, 1000}};
  for (int i = 0; i < 3; ++i) shapes.push_back({r.range(1, 50), r.range(1, 300)});
  for (const RC& s : shapes) {
    const int64_t rows = s.rows, cols = s.cols, n = rows * cols;
    CAPTURE(rows);
    CAPTURE(cols);
    const std::vector<float> x = r.vec(n, -8.0f, 8.0f);
    {
      Case k;
      const int xi = k.in(x), y = k.out(garbage(n), {1e-5, 1e-5});
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.log_softmax_forward(e, rows, cols, p.f[xi], p.f[y]);
      });
    }
    std::vector<float> y(static_cast<size_t>(n));
    HostMemory host;
    reference_table().log_softmax_forward(host.exec(), rows, cols, x.data(), y.data());
    for (bool acc : {false, true}) {
      CAPTURE(acc);
      Case k;
      const int yi = k.in(y), g = k.in(r.vec(n)), dx = k.out(acc ? r.vec(n) : garbage(n), sum_tol(cols));
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.log_softmax_backward(e, rows, cols, p.f[yi], p.f[g], p.f[dx], acc);
      });
    }
    std::vector<int32_t> labels(static_cast<size_t>(rows));
    for (auto& l : labels) l = static_cast<int32_t>(r.range(0, cols - 1));
    for (bool mean : {false, true}) {
      CAPTURE(mean);
      {
        Case k;
        const int lp = k.in(y), l = k.in_i32(labels), o = k.out(garbage(1), {1e-6, 1e-6});
        k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
          T.nll_forward(e, rows, cols, p.f[lp], p.i[l], mean, p.f[o]);
        });
      }
      Case k;
      const int l = k.in_i32(labels), g = k.in({r.uni(0.1f, 4.0f)}), d = k.out(r.vec(n), {1e-6, 1e-6});
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.nll_backward(e, rows, cols, p.i[l], p.f[g], mean, p.f[d]);
      });
    }
  }
}

void check_optim(const TableUnderTest& t, Rng& r, Checked& c) {
  c.mark(&OpTable::sgd_step);
  c.mark(&OpTable::adamw_step);
  const SgdConfig sgds[] = {
      {0.1f, 0.0f, 0.0f, 0.0f, false},  {0.05f, 0.9f, 0.0f, 0.0f, false}, {0.05f, 0.9f, 0.1f, 1e-2f, false},
      {0.01f, 0.9f, 0.0f, 1e-3f, true}, {0.2f, 0.0f, 0.0f, 1e-2f, false}, {0.01f, 0.5f, 0.0f, 0.0f, true},
  };
  for (const SgdConfig& cfg : sgds)
    for (bool first : {true, false}) {
      const int64_t n = elementwise_size(r);
      CAPTURE(n);
      CAPTURE(cfg.momentum);
      CAPTURE(cfg.dampening);
      CAPTURE(cfg.weight_decay);
      CAPTURE(cfg.nesterov);
      CAPTURE(first);
      Case k;
      const int p_ = k.out(r.vec(n), {1e-5, 1e-6}), g = k.in(r.vec(n));
      const int buf = cfg.momentum == 0.0f ? k.null() : k.out(first ? garbage(n) : r.vec(n), {1e-5, 1e-6});
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.sgd_step(e, cfg, n, p.f[p_], p.f[g], p.f[buf], first);
      });
    }
  const AdamWConfig adams[] = {{}, {0.01f, 0.8f, 0.99f, 1e-6f, 0.0f}, {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f}};
  for (const AdamWConfig& cfg : adams)
    for (int64_t step : {int64_t{1}, int64_t{2}, int64_t{10}, int64_t{1000}}) {
      const int64_t n = elementwise_size(r);
      CAPTURE(n);
      CAPTURE(step);
      CAPTURE(cfg.lr);
      Case k;
      std::vector<float> v = r.vec(n, 0.0f, 1.0f);  // a second moment is never negative
      const int p_ = k.out(r.vec(n), {1e-5, 1e-5}), g = k.in(r.vec(n));
      const int m = k.out(r.vec(n), {1e-5, 1e-6}), vi = k.out(v, {1e-5, 1e-6});
      k.run(t, [=](const OpTable& T, const Exec& e, const Ptrs& p) {
        T.adamw_step(e, cfg, n, p.f[p_], p.f[g], p.f[m], p.f[vi], step);
      });
    }
}

}  // namespace

void check_every_entry(const TableUnderTest& t, uint64_t seed) {
  const std::string table = t.table->device;
  CAPTURE(table);
  CAPTURE(seed);
  Rng r{std::mt19937_64(seed)};
  Checked checked;
  check_memory(t, r, checked);
  check_matmul(t, r, checked);
  check_elementwise(t, r, checked);
  check_bias(t, r, checked);
  check_conv(t, r, checked);
  check_pool(t, r, checked);
  check_loss(t, r, checked);
  check_optim(t, r, checked);
  CHECK_MESSAGE(checked.count() == kOpTableEntries, "table '", table, "': ", checked.count(), " of ",
                kOpTableEntries, " entries checked");
}

uint64_t announce_seed(const char* what) {
  const uint64_t seed = oracle_seed();
  std::printf("%s: seed %llu (replay with RINGFENCE_ORACLE_SEED=%llu)\n", what, static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace rf::kernels::oracle
