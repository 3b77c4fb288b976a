#pragma once
// The one place where an op chooses its kernels by device. Ops call
// `kernels_for(device).gemm(...)`; a CUDA table joins the CPU one in a later issue
// (kernels/cuda), and until then asking for it throws a clear error naming the op.
#include <cstdint>

#include "core/device.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/pool.h"

namespace rf {

struct KernelTable {
  void (*gemm)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
               int64_t, float, float*, int64_t);
  void (*axpy)(int64_t, float, const float*, float*);
  void (*copy)(int64_t, const float*, float*);
  void (*add)(int64_t, const float*, const float*, float*);
  void (*add_row_bias)(int64_t, int64_t, const float*, const float*, float*);
  void (*add_row_bias_backward)(int64_t, int64_t, const float*, float*);
  void (*add_channel_bias)(int64_t, int64_t, int64_t, const float*, const float*, float*);
  void (*add_channel_bias_backward)(int64_t, int64_t, int64_t, const float*, float*);
  void (*relu)(int64_t, const float*, float*);
  void (*relu_backward)(int64_t, const float*, const float*, float*, bool);
  void (*transpose)(int64_t, int64_t, const float*, float*);
  void (*add_transposed)(int64_t, int64_t, const float*, float*);
  void (*im2col)(const kernels::cpu::ConvGeometry&, const float*, float*, int64_t, float*);
  void (*col2im)(const kernels::cpu::ConvGeometry&, const float*, int64_t, float*, float*, bool);
  // Stride-1 convolutions without a column matrix (kernels/cpu/conv_direct.h); conv2d
  // takes this route when *_fits says the kernels handle the geometry, im2col + gemm else.
  bool (*conv_direct_fits)(const kernels::cpu::ConvGeometry&);
  void (*pad_image)(const kernels::cpu::ConvGeometry&, const float*, float*);
  void (*conv_direct)(const kernels::cpu::ConvGeometry&, int64_t, const float*, int64_t, const float*,
                      float, float*);
  bool (*conv_direct_weight_grad_fits)(const kernels::cpu::ConvGeometry&, int64_t);
  void (*conv_direct_weight_grad)(const kernels::cpu::ConvGeometry&, int64_t, const float*, const float*,
                                  float, float*);
  void (*flip_kernel)(const kernels::cpu::ConvGeometry&, int64_t, const float*, float*);
  void (*max_pool2d)(const kernels::cpu::PoolGeometry&, const float*, float*, int32_t*);
  void (*max_pool2d_backward)(const kernels::cpu::PoolGeometry&, const float*, const int32_t*,
                              float*, bool);
  void (*log_softmax)(int64_t, int64_t, const float*, float*);
  void (*log_softmax_backward)(int64_t, int64_t, const float*, const float*, float*, bool);
  float (*nll_sum)(int64_t, int64_t, const float*, const int32_t*);
  void (*nll_backward)(int64_t, int64_t, const int32_t*, float, float*);
  void (*sgd_step)(const kernels::cpu::SgdConfig&, int64_t, float*, const float*, float*, bool);
  void (*adamw_step)(const kernels::cpu::AdamWConfig&, int64_t, float*, const float*, float*,
                     float*, int64_t);
};

// Throws rf::Error naming `op` when the device has no kernels.
const KernelTable& kernels_for(Device device, const char* op);

}  // namespace rf
