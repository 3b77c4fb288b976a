// register_cuda_comm in a build without CUDA: nothing to install.
#include "comm/cuda/register.h"

namespace rf::comm {

void register_cuda_comm() {}
bool cuda_comm_built() { return false; }

}  // namespace rf::comm
