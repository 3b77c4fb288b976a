#pragma once
// Direct convolution of a one-channel input (a network's first layer, e.g. the CNN's
// 28 x 28 images): no column matrix, whose K = KH*KW would be far too short for a GEMM.
// Internal to kernels/cuda (conv.cu chooses); per-element arithmetic in conv_index.h.
//
//   forward:  one block a sample: the sample's plane, zero-padded, and the weights staged
//             in shared memory; each thread sums the KH*KW taps, in kh-then-kw order, for
//             one output position and up to 16 output channels (4 quads).
//   dW     += the samples cut into a fixed number of contiguous groups (a function of the
//             batch alone); a block sums its group's terms into a slice of its own, in a
//             fixed order (samples, then positions, per thread; then the threads' partials
//             in thread order), and one warp per weight sums the slices in a fixed tree.
//             Deterministic, no atomics.
// The input gradient of a one-channel convolution is left to the im2col path (the first
// layer's is not asked for).
#include "kernels/op_table.h"

namespace rf::kernels::cuda_ops {

// Whether the direct kernels take s: one input channel, every per-sample index within
// int32, and the staged data within 48 KiB of shared memory; the weight gradient also
// needs KW <= 8 and KH * ceil(OC/4) <= 256 (one thread per kernel row and quad).
bool one_channel_forward_fits(const ConvShape& s);
bool one_channel_wgrad_fits(const ConvShape& s);

void one_channel_forward(const Exec&, const ConvShape&, const float* x, const float* w, const float* bias,
                         float* out);
// dw += the weight gradient.
void one_channel_weight_grad(const Exec&, const ConvShape&, const float* x, const float* g, float* dw);

}  // namespace rf::kernels::cuda_ops
