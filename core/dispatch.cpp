#include "core/dispatch.h"

#include "base/error.h"
#include "base/str.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/softmax.h"

namespace rf {

namespace kc = kernels::cpu;

static const KernelTable kCpu = {
    kc::gemm,        kc::axpy,           kc::copy,           kc::add,
    kc::add_row_bias, kc::add_row_bias_backward, kc::add_channel_bias,
    kc::add_channel_bias_backward, kc::relu, kc::relu_backward,
    kc::im2col,      kc::col2im,     kc::max_pool2d,
    kc::max_pool2d_backward, kc::log_softmax, kc::log_softmax_backward,
    kc::nll_sum,     kc::nll_backward,   kc::sgd_step,
    kc::adamw_step,
};

const KernelTable& kernels_for(Device device, const char* op) {
  if (device == Device::CPU) return kCpu;
  throw Error(str("op '", op, "': no kernels for device ", device_name(device), " yet"));
}

}  // namespace rf
