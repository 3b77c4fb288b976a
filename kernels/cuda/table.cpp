// The CUDA op table (table.h): the launchers of ops.h, one per entry.
#include "kernels/cuda/table.h"

#include "kernels/cuda/ops.h"

namespace rf::kernels {

namespace {

namespace k = cuda_ops;

// Designated initialisers: an entry left out here is a null pointer, and
// -Wmissing-field-initializers (under -Wextra) names it at compile time.
const OpTable kCuda = {
    .device = "cuda",
    .fill = k::fill,
    .copy = k::copy,
    .copy_i32 = k::copy_i32,
    .accumulate = k::accumulate,
    .divide_by = k::divide_by,
    .matmul_forward = k::matmul_forward,
    .matmul_backward = k::matmul_backward,
    .add_forward = k::add_forward,
    .mul_forward = k::mul_forward,
    .mul_backward = k::mul_backward,
    .sum_forward = k::sum_forward,
    .sum_backward = k::sum_backward,
    .bias_forward = k::bias_forward,
    .bias_backward = k::bias_backward,
    .relu_forward = k::relu_forward,
    .relu_backward = k::relu_backward,
    .conv2d_forward = k::conv2d_forward,
    .conv2d_backward = k::conv2d_backward,
    .max_pool2d_forward = k::max_pool2d_forward,
    .max_pool2d_backward = k::max_pool2d_backward,
    .log_softmax_forward = k::log_softmax_forward,
    .log_softmax_backward = k::log_softmax_backward,
    .nll_forward = k::nll_forward,
    .nll_backward = k::nll_backward,
    .sgd_step = k::sgd_step,
    .adamw_step = k::adamw_step,
};

}  // namespace

const OpTable& cuda_table() { return kCuda; }

}  // namespace rf::kernels
