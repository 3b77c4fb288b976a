// allocate_device_registered (comm/cuda/device_memory.h): one cudaMalloc'd block per call.
#include "comm/cuda/device_memory.h"

#include <cuda_runtime.h>

#include "base/error.h"
#include "base/str.h"

namespace rf::comm::cuda {

namespace {

std::string cuda_message(cudaError_t e) { return rf::str(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"); }

// Makes `index` the calling thread's current device (cudaMalloc allocates on it).
void make_current(int index, const char* call_site) {
  int now = -1;
  cudaError_t e = cudaGetDevice(&now);
  if (e == cudaSuccess && now != index) e = cudaSetDevice(index);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw rf::Error(rf::str(call_site, ": cuda:", index, ": cudaSetDevice: ", cuda_message(e)));
  }
}

class DeviceBlock final : public RegisteredMemory {
 public:
  DeviceBlock(void* p, size_t bytes, int index) : p_(p), bytes_(bytes), index_(index) {}
  ~DeviceBlock() override {
    if (!p_) return;
    // cudaFree waits for the device's work on the block; a failure here (a dead context at
    // exit) cannot be reported from a destructor and frees nothing worse than it found.
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != index_) (void)cudaSetDevice(index_);
    if (cudaFree(p_) != cudaSuccess) (void)cudaGetLastError();
    if (now >= 0 && now != index_) (void)cudaSetDevice(now);
  }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
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
  const std::string what = rf::str("allocate_registered: ", bytes, " bytes on cuda:", index);
  int count = 0;
  const cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    throw rf::InvalidInput(
        rf::str(what, ": no CUDA device on this machine (cudaGetDeviceCount: ", cuda_message(ce), ")"));
  }
  if (index < 0 || index >= count)
    throw rf::InvalidInput(rf::str(what, ": this machine has ", count, " GPU", count == 1 ? "" : "s", " (cuda:0..",
                                   count - 1, ")"));
  if (bytes == 0) return std::make_shared<DeviceBlock>(nullptr, 0, index);
  make_current(index, what.c_str());
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    const bool known = cudaMemGetInfo(&free_bytes, &total) == cudaSuccess;
    if (!known) (void)cudaGetLastError();
    throw rf::Error(rf::str(what, ": cudaMalloc: ", cuda_message(e),
                            known ? rf::str("; ", free_bytes, " of ", total, " bytes free") : std::string()));
  }
  auto block = std::make_shared<DeviceBlock>(p, bytes, index);  // frees p if what follows throws
  // Zero-filled, as host registered memory is, and finished before this returns: cudaMemset
  // runs on the legacy stream, which the runtimes' non-blocking streams do not wait for.
  e = cudaMemset(p, 0, bytes);
  if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw rf::Error(rf::str(what, ": cudaMemset + cudaStreamSynchronize: ", cuda_message(e)));
  }
  return block;
}

}  // namespace rf::comm::cuda
