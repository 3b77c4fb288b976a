#include "kernels/reference/table.h"

#include <cmath>
#include <algorithm>
#include <vector>

namespace rf::kernels {

namespace {

void fill(const Exec&, int64_t n, float value, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}
void copy(const Exec&, int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}
void copy_i32(const Exec&, int64_t n, const int32_t* x, int32_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}
void accumulate(const Exec&, int64_t n, const float* g, float* dx, bool acc) {
  for (int64_t i = 0; i < n; ++i) dx[i] = acc ? dx[i] + g[i] : g[i];
}
void divide_by(const Exec&, int64_t n, const float* divisor, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / divisor[0];
}

// op(A)(i, k) and op(B)(k, j) as stored (row-major, row strides lda and ldb).
int64_t a_at(const MatmulShape& s, int64_t i, int64_t k) { return s.trans_a ? k * s.lda + i : i * s.lda + k; }
int64_t b_at(const MatmulShape& s, int64_t k, int64_t j) { return s.trans_b ? j * s.ldb + k : k * s.ldb + j; }

void matmul_forward(const Exec&, const MatmulShape& s, const float* a, const float* b, float* c) {
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < s.k; ++k) acc += double{a[a_at(s, i, k)]} * b[b_at(s, k, j)];
      c[i * s.n + j] = static_cast<float>(acc);
    }
}
// d op(A)(i, k) = sum_j G(i, j) op(B)(k, j); d op(B)(k, j) = sum_i op(A)(i, k) G(i, j);
// each written where that element of A or B is stored.
void matmul_backward(const Exec&, const MatmulShape& s, const float* a, const float* b, const float* g,
                     float* da, float beta_a, float* db, float beta_b) {
  if (da)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t k = 0; k < s.k; ++k) {
        double acc = 0.0;
        for (int64_t j = 0; j < s.n; ++j) acc += double{g[i * s.n + j]} * b[b_at(s, k, j)];
        float& d = da[a_at(s, i, k)];
        d = beta_a == 0.0f ? static_cast<float>(acc) : static_cast<float>(acc + double{d});
      }
  if (db)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < s.m; ++i) acc += double{a[a_at(s, i, k)]} * g[i * s.n + j];
        float& d = db[b_at(s, k, j)];
        d = beta_b == 0.0f ? static_cast<float>(acc) : static_cast<float>(acc + double{d});
      }
}

void add_forward(const Exec&, int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
void mul_forward(const Exec&, int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
void mul_backward(const Exec&, int64_t n, const float* a, const float* b, const float* g, float* da,
                  float* db) {
  for (int64_t i = 0; i < n; ++i) {
    if (da) da[i] += g[i] * b[i];
    if (db) db[i] += g[i] * a[i];
  }
}
void sum_forward(const Exec&, int64_t n, const float* x, float* out) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += x[i];
  out[0] = static_cast<float>(acc);
}
void sum_backward(const Exec&, int64_t n, const float* g, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] += g[0];
}

// Element (r, c, p) of a bias-shaped x: row r, column (or channel) c, plane position p.
int64_t bias_at(const BiasShape& s, int64_t r, int64_t c, int64_t p) { return (r * s.cols + c) * s.plane + p; }

void bias_forward(const Exec&, const BiasShape& s, const float* x, const float* bias, float* out) {
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t c = 0; c < s.cols; ++c)
      for (int64_t p = 0; p < s.plane; ++p) out[bias_at(s, r, c, p)] = x[bias_at(s, r, c, p)] + bias[c];
}
void bias_backward(const Exec&, const BiasShape& s, const float* g, float* dbias) {
  for (int64_t c = 0; c < s.cols; ++c) {
    double acc = 0.0;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t p = 0; p < s.plane; ++p) acc += g[bias_at(s, r, c, p)];
    dbias[c] = static_cast<float>(acc + double{dbias[c]});
  }
}

void relu_forward(const Exec&, int64_t n, const float* x, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
void relu_backward(const Exec&, int64_t n, const float* out, const float* g, float* dx, bool acc) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = out[i] > 0.0f ? g[i] : 0.0f;
    dx[i] = acc ? dx[i] + d : d;
  }
}

// The input position tap (kh, kw) of output (oh, ow) reads, or -1 in the zero padding.
int64_t conv_in(const ConvGeometry& g, int64_t c, int64_t oh, int64_t ow, int64_t kh, int64_t kw) {
  const int64_t h = oh * g.stride - g.padding + kh, w = ow * g.stride - g.padding + kw;
  if (h < 0 || h >= g.height || w < 0 || w >= g.width) return -1;
  return (c * g.height + h) * g.width + w;
}

//   out[n, oc, oh, ow] = bias[oc] + sum over (c, kh, kw) of w[oc, c, kh, kw] * x[n, c, ih, iw]
void conv2d_forward(const Exec&, const ConvShape& s, const float* x, const float* w, const float* bias,
                    float* out) {
  const ConvGeometry& g = s.g;
  const int64_t OH = g.out_h(), OW = g.out_w(), in_plane = g.channels * g.height * g.width;
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t oc = 0; oc < s.out_channels; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? double{bias[oc]} : 0.0;
          for (int64_t c = 0; c < g.channels; ++c)
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                const int64_t i = conv_in(g, c, oh, ow, kh, kw);
                if (i >= 0)
                  acc += double{w[((oc * g.channels + c) * g.kernel_h + kh) * g.kernel_w + kw]} * x[n * in_plane + i];
              }
          out[((n * s.out_channels + oc) * OH + oh) * OW + ow] = static_cast<float>(acc);
        }
}

// The adjoint of the sum above: every (n, oc, oh, ow, c, kh, kw) term sends its gradient
// to the input element and the weight it read, and the output gradient to the bias.
void conv2d_backward(const Exec&, const ConvShape& s, const float* x, const float* w, const float* g,
                     float* dx, bool accumulate_dx, float* dw, float* dbias) {
  const ConvGeometry& geo = s.g;
  const int64_t OH = geo.out_h(), OW = geo.out_w(), in_plane = geo.channels * geo.height * geo.width;
  const int64_t wsize = s.out_channels * geo.col_rows();
  std::vector<double> gx(static_cast<size_t>(s.batch * in_plane), 0.0), gw(static_cast<size_t>(wsize), 0.0),
      gb(static_cast<size_t>(s.out_channels), 0.0);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t oc = 0; oc < s.out_channels; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const double go = g[((n * s.out_channels + oc) * OH + oh) * OW + ow];
          gb[static_cast<size_t>(oc)] += go;
          for (int64_t c = 0; c < geo.channels; ++c)
            for (int64_t kh = 0; kh < geo.kernel_h; ++kh)
              for (int64_t kw = 0; kw < geo.kernel_w; ++kw) {
                const int64_t i = conv_in(geo, c, oh, ow, kh, kw);
                if (i < 0) continue;
                const int64_t wi = ((oc * geo.channels + c) * geo.kernel_h + kh) * geo.kernel_w + kw;
                gx[static_cast<size_t>(n * in_plane + i)] += go * w[wi];
                gw[static_cast<size_t>(wi)] += go * x[n * in_plane + i];
              }
        }
  if (dx)
    for (size_t i = 0; i < gx.size(); ++i) dx[i] = static_cast<float>(accumulate_dx ? gx[i] + dx[i] : gx[i]);
  if (dw)
    for (size_t i = 0; i < gw.size(); ++i) dw[i] = static_cast<float>(gw[i] + dw[i]);
  if (dbias)
    for (size_t i = 0; i < gb.size(); ++i) dbias[i] = static_cast<float>(gb[i] + dbias[i]);
}

// argmax: the winner's index inside its plane: the first of equal maxima in scan order;
// a NaN takes over (PyTorch's rule).
void max_pool2d_forward(const Exec&, const PoolGeometry& g, const float* x, float* out, int32_t* argmax) {
  const int64_t OH = g.out_h(), OW = g.out_w();
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t best = (oh * g.stride) * g.width + ow * g.stride;
        for (int64_t kh = 0; kh < g.kernel; ++kh)
          for (int64_t kw = 0; kw < g.kernel; ++kw) {
            const int64_t i = (oh * g.stride + kh) * g.width + ow * g.stride + kw;
            const float v = x[p * g.height * g.width + i];
            if (v > x[p * g.height * g.width + best] || std::isnan(v)) best = i;
          }
        out[(p * OH + oh) * OW + ow] = x[p * g.height * g.width + best];
        argmax[(p * OH + oh) * OW + ow] = static_cast<int32_t>(best);
      }
}
void max_pool2d_backward(const Exec&, const PoolGeometry& g, const float* dout, const int32_t* argmax,
                         float* dx, bool acc) {
  const int64_t plane = g.height * g.width, outs = g.out_h() * g.out_w();
  if (!acc)
    for (int64_t i = 0; i < g.planes * plane; ++i) dx[i] = 0.0f;
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t o = 0; o < outs; ++o) dx[p * plane + argmax[p * outs + o]] += dout[p * outs + o];
}

// y = x - log(sum exp(x)), computed in double around the row maximum.
void log_softmax_forward(const Exec&, int64_t rows, int64_t cols, const float* x, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    double m = x[r * cols];
    for (int64_t c = 1; c < cols; ++c) m = std::max(m, double{x[r * cols + c]});
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(double{x[r * cols + c]} - m);
    const double lse = m + std::log(s);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(double{x[r * cols + c]} - lse);
  }
}
// dx = g - softmax * sum(g), softmax = exp(y).
void log_softmax_backward(const Exec&, int64_t rows, int64_t cols, const float* y, const float* g, float* dx,
                          bool acc) {
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += g[r * cols + c];
    for (int64_t c = 0; c < cols; ++c) {
      const double d = double{g[r * cols + c]} - std::exp(double{y[r * cols + c]}) * s;
      float& o = dx[r * cols + c];
      o = static_cast<float>(acc ? d + o : d);
    }
  }
}
void nll_forward(const Exec&, int64_t rows, int64_t cols, const float* logp, const int32_t* labels, bool mean,
                 float* out) {
  double s = 0.0;
  for (int64_t r = 0; r < rows; ++r) s -= logp[r * cols + labels[r]];
  out[0] = static_cast<float>(mean ? s / static_cast<double>(rows) : s);
}
void nll_backward(const Exec&, int64_t rows, int64_t cols, const int32_t* labels, const float* g, bool mean,
                  float* dlogp) {
  const double d = mean ? double{g[0]} / static_cast<double>(rows) : double{g[0]};
  for (int64_t r = 0; r < rows; ++r) {
    float& o = dlogp[r * cols + labels[r]];
    o = static_cast<float>(o - d);
  }
}

// torch.optim.SGD: d = g + wd p; buf = d (first step) or momentum buf + (1 - dampening) d;
// d = d + momentum buf (nesterov) or buf; p -= lr d.
void sgd_step(const Exec&, const SgdConfig& c, int64_t n, float* param, const float* grad, float* buf,
              bool first_step) {
  for (int64_t i = 0; i < n; ++i) {
    double d = double{grad[i]} + double{c.weight_decay} * param[i];
    if (c.momentum != 0.0f) {
      const double b = first_step ? d : double{c.momentum} * buf[i] + (1.0 - double{c.dampening}) * d;
      buf[i] = static_cast<float>(b);
      d = c.nesterov ? d + double{c.momentum} * b : b;
    }
    param[i] = static_cast<float>(param[i] - double{c.lr} * d);
  }
}
// torch.optim.AdamW: p *= 1 - lr wd; m, v updated; p -= lr / (1 - b1^t) * m / (sqrt(v) /
// sqrt(1 - b2^t) + eps).
void adamw_step(const Exec&, const AdamWConfig& c, int64_t n, float* param, const float* grad, float* m,
                float* v, int64_t step) {
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(double{c.beta1}, t), bc2 = 1.0 - std::pow(double{c.beta2}, t);
  for (int64_t i = 0; i < n; ++i) {
    const double g = grad[i];
    const double p = param[i] * (1.0 - double{c.lr} * c.weight_decay);
    const double mi = double{c.beta1} * m[i] + (1.0 - double{c.beta1}) * g;
    const double vi = double{c.beta2} * v[i] + (1.0 - double{c.beta2}) * g * g;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    param[i] = static_cast<float>(p - double{c.lr} / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + double{c.eps}));
  }
}

const OpTable kReference = {
    .device = "reference",
    .fill = fill,
    .copy = copy,
    .copy_i32 = copy_i32,
    .accumulate = accumulate,
    .divide_by = divide_by,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .add_forward = add_forward,
    .mul_forward = mul_forward,
    .mul_backward = mul_backward,
    .sum_forward = sum_forward,
    .sum_backward = sum_backward,
    .bias_forward = bias_forward,
    .bias_backward = bias_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .conv2d_forward = conv2d_forward,
    .conv2d_backward = conv2d_backward,
    .max_pool2d_forward = max_pool2d_forward,
    .max_pool2d_backward = max_pool2d_backward,
    .log_softmax_forward = log_softmax_forward,
    .log_softmax_backward = log_softmax_backward,
    .nll_forward = nll_forward,
    .nll_backward = nll_backward,
    .sgd_step = sgd_step,
    .adamw_step = adamw_step,
};

}  // namespace

const OpTable& reference_table() { return kReference; }

}  // namespace rf::kernels
