#include "core/dispatch.h"

#include "base/error.h"
#include "base/str.h"
#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/softmax.h"

namespace rf {

namespace kc = kernels::cpu;

// Designated initialisers: a new entry in KernelTable that is left out here is a null
// pointer, and -Wmissing-field-initializers (under -Wextra) names it at compile time.
static const KernelTable kCpu = {
    .gemm = kc::gemm,
    .axpy = kc::axpy,
    .copy = kc::copy,
    .add = kc::add,
    .add_row_bias = kc::add_row_bias,
    .add_row_bias_backward = kc::add_row_bias_backward,
    .add_channel_bias = kc::add_channel_bias,
    .add_channel_bias_backward = kc::add_channel_bias_backward,
    .relu = kc::relu,
    .relu_backward = kc::relu_backward,
    .transpose = kc::transpose,
    .add_transposed = kc::add_transposed,
    .im2col = kc::im2col,
    .col2im = kc::col2im,
    .conv_direct_fits = kc::conv_direct_fits,
    .pad_image = kc::pad_image,
    .conv_direct = kc::conv_direct,
    .conv_direct_weight_grad_fits = kc::conv_direct_weight_grad_fits,
    .conv_direct_weight_grad = kc::conv_direct_weight_grad,
    .flip_kernel = kc::flip_kernel,
    .max_pool2d = kc::max_pool2d,
    .max_pool2d_backward = kc::max_pool2d_backward,
    .log_softmax = kc::log_softmax,
    .log_softmax_backward = kc::log_softmax_backward,
    .nll_sum = kc::nll_sum,
    .nll_backward = kc::nll_backward,
    .sgd_step = kc::sgd_step,
    .adamw_step = kc::adamw_step,
};

const KernelTable& kernels_for(Device device, const char* op) {
  if (device == Device::CPU) return kCpu;
  throw Error(str("op '", op, "': no kernels for device ", device_name(device), " yet"));
}

}  // namespace rf
