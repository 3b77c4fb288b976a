#pragma once
// Differentiable ops. Each records its derivative rule next to its forward (ops_*.cpp);
// every rule accumulates (+=) into its inputs' gradients. Shapes are checked and a
// mismatch throws rf::InvalidInput naming the op and both shapes.
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace rf {

// op(a) @ op(b) for 2-D tensors; op(x) = x^T when the flag is set (no copy is made).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
Tensor add(const Tensor& a, const Tensor& b);  // same shape
Tensor mul(const Tensor& a, const Tensor& b);  // elementwise, same shape
Tensor sum(const Tensor& x);                   // all elements -> 0-d
// Bias broadcast: x [N, F] + bias [F], or x [N, C, H, W] + bias [C] (per channel).
// Its gradient for bias is the sum over the broadcast axes.
Tensor add_bias(const Tensor& x, const Tensor& bias);
Tensor relu(const Tensor& x);

// x [N, C, H, W], weight [OC, C, KH, KW], bias [OC] or undefined; im2col + GEMM.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
              int64_t padding = 0);
// No padding; stride 0 means stride = kernel.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0);

// Views sharing x's storage (x is contiguous).
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int start_dim = 1);  // [N, ...] -> [N, rest] for start_dim 1

enum class Reduction { Sum, Mean };
Tensor log_softmax(const Tensor& x);  // over the last axis of a 2-D tensor
// -logp[i, labels[i]] summed or averaged over rows; labels checked against [0, C).
Tensor nll_loss(const Tensor& logp, std::span<const int32_t> labels, Reduction r = Reduction::Mean);
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> labels,
                     Reduction r = Reduction::Mean);
// InvalidInput naming the first label outside [0, classes) and its row: nll_loss's check of
// host labels, for a caller that copies them to the device itself.
void check_class_labels(std::span<const int32_t> labels, int64_t classes);
// The same with the labels already on logp's device: `labels` holds rows int32 values,
// which the caller has checked against [0, C) (check_class_labels). Nothing is copied from the host, so the
// call can be captured in a CUDA graph (core/cuda_graph.h); `labels` stays alive as long
// as the result's graph.
Tensor nll_loss(const Tensor& logp, std::shared_ptr<Storage> labels, Reduction r = Reduction::Mean);
Tensor cross_entropy(const Tensor& logits, std::shared_ptr<Storage> labels, Reduction r = Reduction::Mean);

}  // namespace rf
