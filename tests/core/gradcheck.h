#pragma once
// Finite-difference check of an op's backward: for a scalar function f of some leaf
// tensors, compare autograd's gradient with central differences (f(x+h) - f(x-h)) / 2h,
// evaluated in double from float forward passes. The functions under test are piecewise
// linear or smooth, and inputs are chosen away from kinks (relu at 0, pooling ties).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/autograd.h"
#include "core/random.h"
#include "core/tensor.h"

namespace rf::test {

inline Tensor random_tensor(const Shape& s, Generator& g, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(s);
  for (float& v : t.values()) v = g.uniform(lo, hi);
  return t;
}

// f must return a 1-element tensor built from `inputs` (all leaves requiring grad).
inline void gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                      std::vector<Tensor> inputs, float h = 1e-2f, double atol = 2e-3,
                      double rtol = 1e-2) {
  for (Tensor& t : inputs) {
    t.set_requires_grad(true);
    t.zero_grad();
  }
  f(inputs).backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& t = inputs[k];
    std::vector<float> analytic(t.grad().values().begin(), t.grad().values().end());
    NoGradGuard ng;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float x0 = t.data()[i];
      t.data()[i] = x0 + h;
      const double fp = f(inputs).item();
      t.data()[i] = x0 - h;
      const double fm = f(inputs).item();
      t.data()[i] = x0;
      const double numeric = (fp - fm) / (2.0 * h);
      INFO("input ", k, " element ", i, ": analytic ", analytic[i], " numeric ", numeric);
      CHECK(std::abs(analytic[i] - numeric) <= atol + rtol * std::abs(numeric));
    }
  }
}

}  // namespace rf::test
