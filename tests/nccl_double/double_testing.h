#pragma once
// Helpers for tests that run the NCCL backend over the double (fake_hooks.h), e.g.
// tests/comm/nccl_double_mp_test.cpp. Link rf_comm_nccl_double (or rf_fake_nccl and
// rf_fake_cudart for the double alone).
//
//   * Device memory is host memory: cudaMalloc a buffer (DeviceArray) and read or write it
//     from the host directly, once the stream that writes it is synchronized.
//   * A stuck compute kernel: rf_fake_cuda_spin(stream); everything behind it on that
//     stream waits until rf_fake_cuda_release_spins() (process-wide: every spin so far).
//   * Leaks: rf_fake_cuda_live_bytes(device) counts cudaMalloc'd bytes plus
//     kFakeNcclCommBytes per live NCCL communicator; rf_fake_nccl_live_comms().
//   * One GPU per rank: rf_fake_cuda_contexts() == 1u << device (own_context_only).
//   * Which NCCL calls ran: RF_FAKE_NCCL_LOG=1 in the ranks' environment.
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>

#include "comm/bootstrap/local_launcher.h"
#include "tests/nccl_double/fake_hooks.h"

namespace rf::nccl_double {

// `n` elements of T in fake device memory of the calling thread's current device.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  ~DeviceArray() {
    if (p_) cudaFree(p_);  // synchronizes the device first, as CUDA does
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  T& operator[](size_t i) const { return p_[i]; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// The environment a rank needs: `devices` fake GPUs (rank r uses cuda:r, so at least the
// world size), and optionally a delay before each launch job's kernel and the call log.
inline void add_double_env(rf::comm::LocalLaunch& l, int devices, int inprogress_ms = 0, bool log = false) {
  l.env.push_back({"RF_FAKE_CUDA_DEVICES", std::to_string(devices)});
  if (inprogress_ms > 0) l.env.push_back({"RF_FAKE_NCCL_INPROGRESS_MS", std::to_string(inprogress_ms)});
  if (log) l.env.push_back({"RF_FAKE_NCCL_LOG", "1"});
}

// True once pred() holds, false if `bound` passed first (polled every millisecond).
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// True when this process made a CUDA context on `device` and on no other.
inline bool own_context_only(int device) { return rf_fake_cuda_contexts() == (1u << device); }

}  // namespace rf::nccl_double
