#pragma once
// im2col / col2im for one NCHW sample: conv2d becomes a GEMM (W[OC, C*KH*KW] x col).
// col has C*KH*KW rows (row = (c*KH + kh)*KW + kw) and OH*OW columns; taps that fall in
// the zero padding read 0 (im2col) and are dropped (col2im).
#include <cstdint>

namespace rf::kernels::cpu {

struct ConvGeometry {
  int64_t channels, height, width;  // input plane
  int64_t kernel_h, kernel_w;
  int64_t stride, padding;
  int64_t out_h() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  int64_t out_w() const { return (width + 2 * padding - kernel_w) / stride + 1; }
  int64_t col_rows() const { return channels * kernel_h * kernel_w; }
  int64_t col_cols() const { return out_h() * out_w(); }
};

void im2col(const ConvGeometry& g, const float* image, float* col);
// image += col2im(col): the adjoint of im2col (accumulates, for the input gradient).
void col2im_add(const ConvGeometry& g, const float* col, float* image);

}  // namespace rf::kernels::cpu
