#include "kernels/cpu/optim.h"

#include <cmath>

namespace rf::kernels::cpu {

void sgd_step(const SgdConfig& c, int64_t n, float* param, const float* grad,
              float* momentum_buf, bool first_step) {
  const float neg_lr = -c.lr;
  const float keep = 1.0f - c.dampening;
  for (int64_t i = 0; i < n; ++i) {
    float d = grad[i];
    if (c.weight_decay != 0.0f) d = d + c.weight_decay * param[i];
    if (c.momentum != 0.0f) {
      float b = first_step ? d : c.momentum * momentum_buf[i] + keep * d;
      momentum_buf[i] = b;
      d = c.nesterov ? d + c.momentum * b : b;
    }
    param[i] = param[i] + neg_lr * d;
  }
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
