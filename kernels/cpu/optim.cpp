#include "kernels/cpu/optim.h"

#include <cmath>

namespace rf::kernels::cpu {

namespace {

// The options are loop-invariant: one specialised loop per combination lets the compiler
// vectorise it (a branchy generic loop measured 18 % of an MLP step). The arithmetic per
// element is the same in every variant.
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void sgd_loop(const SgdConfig& c, int64_t n, float* __restrict param, const float* __restrict grad,
              float* __restrict buf) {
  const float neg_lr = -c.lr, keep = 1.0f - c.dampening, wd = c.weight_decay, mom = c.momentum;
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i];
    if constexpr (kDecay) d = d + wd * param[i];
    if constexpr (kMomentum) {
      float b;
      if constexpr (kFirst) b = d;
      else b = mom * buf[i] + keep * d;
      buf[i] = b;
      if constexpr (kNesterov) d = d + mom * b;
      else d = b;
    }
    param[i] = param[i] + neg_lr * d;
  }
}

template <bool kDecay>
void sgd_dispatch(const SgdConfig& c, int64_t n, float* p, const float* g, float* buf, bool first) {
  if (c.momentum == 0.0f) return sgd_loop<kDecay, false, false, false>(c, n, p, g, buf);
  if (first) {
    if (c.nesterov) return sgd_loop<kDecay, true, true, true>(c, n, p, g, buf);
    return sgd_loop<kDecay, true, true, false>(c, n, p, g, buf);
  }
  if (c.nesterov) return sgd_loop<kDecay, true, false, true>(c, n, p, g, buf);
  return sgd_loop<kDecay, true, false, false>(c, n, p, g, buf);
}

}  // namespace

void sgd_step(const SgdConfig& c, int64_t n, float* param, const float* grad,
              float* momentum_buf, bool first_step) {
  if (c.weight_decay != 0.0f) sgd_dispatch<true>(c, n, param, grad, momentum_buf, first_step);
  else sgd_dispatch<false>(c, n, param, grad, momentum_buf, first_step);
}

void adamw_step(const AdamWConfig& c, int64_t n, float* param, const float* grad, float* exp_avg,
                float* exp_avg_sq, int64_t step) {
  // Scalars are computed in double like Python floats, then used as float factors.
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(step));
  const float decay = static_cast<float>(1.0 - static_cast<double>(c.lr) * c.weight_decay);
  const float neg_step_size = static_cast<float>(-(static_cast<double>(c.lr) / bc1));
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float one_minus_b1 = 1.0f - c.beta1, one_minus_b2 = 1.0f - c.beta2;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    param[i] *= decay;
    exp_avg[i] = exp_avg[i] * c.beta1 + one_minus_b1 * g;
    exp_avg_sq[i] = exp_avg_sq[i] * c.beta2 + one_minus_b2 * g * g;
    const float denom = std::sqrt(exp_avg_sq[i]) / bc2_sqrt + c.eps;
    param[i] = param[i] + neg_step_size * (exp_avg[i] / denom);
  }
}

}  // namespace rf::kernels::cpu
