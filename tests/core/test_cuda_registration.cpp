// runtime(cuda:i) on any machine: before registration, without a GPU and in a build without
// CUDA, the error names the device, the asker and why (core/cuda_runtime.h).
#include <doctest/doctest.h>

#include <string>

#include "base/error.h"
#include "core/cuda_runtime.h"
#include "core/device_runtime.h"
#include "kernels/op_table.h"

namespace {

using namespace rf;

std::string error_of(Device d, const char* what) {
  try {
    runtime(d, what);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

struct Unregister {
  ~Unregister() { set_cuda_runtime_provider(nullptr); }
};

}  // namespace

TEST_CASE("cuda runtime: unregistered, or no GPU, or no CUDA in the build, is an error naming the device") {
  set_cuda_runtime_provider(nullptr);
  const std::string before = error_of(Device::CUDA, "matmul");
  CHECK(before.find("'matmul': cuda:0: ") == 0);
#if RINGFENCE_HAVE_CUDA
  CHECK(before.find("did not register the CUDA runtime") != std::string::npos);
#else
  CHECK(before.find("this build has no CUDA") != std::string::npos);
#endif

  Unregister restore;
  register_cuda_runtime();
  register_cuda_runtime();  // idempotent
  const int gpus = cuda_device_count();
  CHECK(gpus >= 0);
  CHECK((gpus == 0) == !cuda_unavailable_reason().empty());
  const std::string beyond = error_of(Device::cuda(15), "conv2d");
  INFO(beyond);
  CHECK(beyond.find("'conv2d': cuda:15: ") == 0);
  if (gpus == 0) {
    const std::string none = error_of(Device::CUDA, "matmul");
    INFO(none);
#if RINGFENCE_HAVE_CUDA
    CHECK(none.find("'matmul': cuda:0: no CUDA device on this machine (") == 0);
#else
    CHECK(none.find("this build has no CUDA") != std::string::npos);
#endif
  } else {
    CHECK(runtime(Device::CUDA).device() == Device::CUDA);
    CHECK(std::string(runtime(Device::CUDA).ops().device) == "cuda");
  }
}
