#pragma once
// The shapes and settings op-table entries take (kernels/op_table.h), shared by every
// device's kernels.
#include <cstdint>

namespace rf::kernels {

// One NCHW sample's convolution: input plane, kernel, stride and padding.
struct ConvGeometry {
  int64_t channels, height, width;  // input plane
  int64_t kernel_h, kernel_w;
  int64_t stride, padding;
  int64_t out_h() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  int64_t out_w() const { return (width + 2 * padding - kernel_w) / stride + 1; }
  int64_t col_rows() const { return channels * kernel_h * kernel_w; }
  int64_t col_cols() const { return out_h() * out_w(); }
  int64_t padded_size() const { return channels * (height + 2 * padding) * (width + 2 * padding); }
};

// A batched convolution: `batch` samples of geometry g into `out_channels` planes.
struct ConvShape {
  ConvGeometry g;
  int64_t batch, out_channels;
};

// 2-D max pooling over NCHW planes, no padding.
struct PoolGeometry {
  int64_t planes;  // N * C
  int64_t height, width;
  int64_t kernel, stride;
  int64_t out_h() const { return (height - kernel) / stride + 1; }
  int64_t out_w() const { return (width - kernel) / stride + 1; }
};

// x [rows, cols] + bias[cols] (plane == 1), or NCHW x [rows = N, cols = C, plane = H*W]
// + bias[C] per channel.
struct BiasShape {
  int64_t rows, cols, plane;
  bool per_channel;
};

// PyTorch's torch.optim.SGD and AdamW settings (single-tensor path semantics).
struct SgdConfig {
  float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};
struct AdamWConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 1e-2f;
};

}  // namespace rf::kernels
