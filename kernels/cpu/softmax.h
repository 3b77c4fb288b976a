#pragma once
// log_softmax over the last axis of a (rows x cols) matrix, and the negative log-likelihood
// that turns it into cross-entropy. Labels are already validated by the caller.
#include <cstdint>

namespace rf::kernels::cpu {

void log_softmax(int64_t rows, int64_t cols, const float* x, float* y);
// dx (+)= dy - softmax(x) * sum(dy), with softmax(x) = exp(y)
void log_softmax_backward(int64_t rows, int64_t cols, const float* y, const float* dy,
                          float* dx, bool accumulate);

// Returns -sum_r logp[r, label[r]] (accumulated in double, then rounded once).
float nll_sum(int64_t rows, int64_t cols, const float* logp, const int32_t* labels);
// dlogp[r, label[r]] += -scale, where scale = dloss (sum) or dloss / rows (mean).
void nll_backward(int64_t rows, int64_t cols, const int32_t* labels, float scale, float* dlogp);

}  // namespace rf::kernels::cpu
