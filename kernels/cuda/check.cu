#include "kernels/cuda/check.h"

namespace rf::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(rf::str(file, ":", line, ": ", call, " failed: ", cudaGetErrorName(err), " (",
                          cudaGetErrorString(err), ")"));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw CudaError(rf::str(file, ":", line, ": ", call, " failed: ", cublasGetStatusName(status), " (",
                          cublasGetStatusString(status), ")"));
}

}  // namespace rf::cuda
