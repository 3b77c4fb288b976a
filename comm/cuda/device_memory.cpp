// Registered device memory: one cudaMalloc'd, zero-filled block (comm/cuda/device_memory.h).
#include "comm/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "base/error.h"
#include "base/str.h"

namespace rf::comm::cuda {

namespace {

class DeviceBlock final : public RegisteredMemory {
 public:
  DeviceBlock(void* p, size_t bytes, int index) : p_(p), bytes_(bytes), index_(index) {}
  ~DeviceBlock() override {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != index_) (void)cudaSetDevice(index_);
    (void)cudaFree(p_);  // cudaFree waits for the work queued on the block
  }
  void* data() const override { return p_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::cuda; }
  int device_index() const override { return index_; }

 private:
  void* p_;
  size_t bytes_;
  int index_;
};

}  // namespace

std::shared_ptr<RegisteredMemory> allocate_device_registered(size_t bytes, int index) {
  int count = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    (void)cudaGetLastError();
    throw rf::InvalidInput(rf::str("allocate_registered: cuda:", index, ": no CUDA device (cudaGetDeviceCount: ",
                                   cudaGetErrorName(e), ")"));
  }
  if (index < 0 || index >= count)
    throw rf::InvalidInput(rf::str("allocate_registered: cuda:", index, ": no such GPU (", count, " found)"));
  if (const cudaError_t e = cudaSetDevice(index); e != cudaSuccess)
    throw rf::Error(rf::str("allocate_registered: cudaSetDevice(", index, "): ", cudaGetErrorString(e)));
  void* p = nullptr;
  if (bytes > 0) {
    if (const cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) {
      (void)cudaGetLastError();
      throw rf::Error(rf::str("allocate_registered: ", bytes, " bytes on cuda:", index, ": ", cudaGetErrorString(e)));
    }
    if (const cudaError_t e = cudaMemset(p, 0, bytes); e != cudaSuccess) {
      (void)cudaFree(p);
      throw rf::Error(rf::str("allocate_registered: zeroing ", bytes, " bytes on cuda:", index, ": ",
                              cudaGetErrorString(e)));
    }
    // The memset is on the legacy stream, which the runtimes' non-blocking streams do not
    // wait for: finish it here (allocation is never on the step path).
    if (const cudaError_t e = cudaStreamSynchronize(nullptr); e != cudaSuccess)
      throw rf::Error(rf::str("allocate_registered: cuda:", index, ": ", cudaGetErrorString(e)));
  }
  return std::make_shared<DeviceBlock>(p, bytes, index);
}

}  // namespace rf::comm::cuda
