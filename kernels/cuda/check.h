#pragma once
// One checked path for every CUDA runtime and cuBLAS call: a failure throws rf::CudaError
// naming the call's text, the file:line and the library's own message. Kernel launches
// are checked with RF_CUDA_CHECK_LAUNCH() right after the launch (cudaGetLastError).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "base/error.h"
#include "base/str.h"

namespace rf::cuda {

class CudaError : public rf::Error {
 public:
  using rf::Error::Error;
};

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace rf::cuda

#define RF_CUDA_CHECK(call)                                                                    \
  do {                                                                                         \
    cudaError_t rf_err_ = (call);                                                              \
    if (rf_err_ != cudaSuccess) ::rf::cuda::throw_cuda_error(rf_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define RF_CUDA_CHECK_LAUNCH() RF_CUDA_CHECK(cudaGetLastError())

#define RF_CUBLAS_CHECK(call)                                                                             \
  do {                                                                                                    \
    cublasStatus_t rf_st_ = (call);                                                                       \
    if (rf_st_ != CUBLAS_STATUS_SUCCESS) ::rf::cuda::throw_cublas_error(rf_st_, #call, __FILE__, __LINE__); \
  } while (0)
