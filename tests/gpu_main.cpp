// The main of every GPU test executable (label gpu, cmake/RingfenceTesting.cmake
// rf_gpu_test): without a GPU it prints why and exits 77, which ctest reports as skipped
// (SKIP_RETURN_CODE), never as passed; with one it installs the CUDA runtime and runs the
// doctest cases it was given.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "core/cuda_runtime.h"

int main(int argc, char** argv) {
  if (rf::cuda_device_count() == 0) {
    std::printf("SKIPPED: no GPU: %s\n", rf::cuda_unavailable_reason().c_str());
    return 77;
  }
  rf::register_cuda_runtime();
  doctest::Context context(argc, argv);
  return context.run();
}
