// rf_core_cuda in a build without CUDA: the same functions, with nothing to install
// (core/cuda_runtime.h). runtime(cuda:i) keeps saying "this build has no CUDA".
#include "core/cuda_runtime.h"

namespace rf {

void register_cuda_runtime() {}
int cuda_device_count() { return 0; }
void cuda_profiler_range(bool) {}
std::string cuda_unavailable_reason() { return "this build has no CUDA (no nvcc was found when it was configured)"; }

}  // namespace rf
