#pragma once
// One checked path for every CUDA runtime call: a failure throws rf::CudaError naming the
// call, the file:line and CUDA's own message.
#include <cuda_runtime.h>

#include "base/error.h"
#include "base/str.h"

namespace rf::cuda {

class CudaError : public rf::Error {
 public:
  using rf::Error::Error;
};

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

}  // namespace rf::cuda

#define RF_CUDA_CHECK(call)                                                      \
  do {                                                                           \
    cudaError_t rf_err_ = (call);                                                \
    if (rf_err_ != cudaSuccess) ::rf::cuda::throw_cuda_error(rf_err_, #call, __FILE__, __LINE__); \
  } while (0)
