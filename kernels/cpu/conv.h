#pragma once
// im2col / col2im for one NCHW sample: conv2d becomes a GEMM (W[OC, C*KH*KW] x col).
// col has C*KH*KW rows (row = (c*KH + kh)*KW + kw) and OH*OW columns; taps that fall in
// the zero padding read 0 (im2col) and are dropped (col2im).
//
// Both go through a zero-padded copy of the image (`padded`, padded_size() floats, owned
// by the caller so it is allocated once): every column row is then a plain copy of OW
// floats per output row, with no bounds logic in the inner loop.
#include <cstdint>

#include "kernels/geometry.h"

namespace rf::kernels::cpu {

using kernels::ConvGeometry;  // kernels/geometry.h

// ld: the row stride of col (>= col_cols()); several samples' blocks can sit side by side
// in one column matrix (ld = S * col_cols()) so one GEMM serves S samples.
void im2col(const ConvGeometry& g, const float* image, float* col, int64_t ld, float* padded);
// image (+)= col2im(col): the adjoint of im2col, for the input gradient; accumulate=false
// overwrites image (every element is written).
void col2im(const ConvGeometry& g, const float* col, int64_t ld, float* image, float* padded,
            bool accumulate);

}  // namespace rf::kernels::cpu
