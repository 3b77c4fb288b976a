// rf_ddp_cuda in a build without CUDA: gpu_hang has no GPU to make stuck.
#include "ddp/gpu_hang.h"

#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {

void hang_gpu_stream(int device, void*) {
  throw rf::Error(rf::str("gpu_hang on cuda:", device, ": this build has no CUDA"));
}

}  // namespace rf::ddp
