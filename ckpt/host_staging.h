#pragma once
// HostStaging — the one path by which the floats of the state S reach the host (its digest,
// the safetensors image of a disk checkpoint or of a peer transfer, StateCopy) and by which
// a validated image goes back into the tensors (restore).
//
// A CPU tensor is read where it lives: no copy. A tensor on another device is copied into
// pinned host memory from that device's runtime (DeviceRuntime::host_staging) with one
// explicit blocking read (DeviceRuntime::read, counted); the memory is kept and reused call
// after call, grown when a state needs more, never shrunk. Writing back is a memcpy on the
// CPU and DeviceRuntime::write elsewhere (ordered on the device's stream; the source may be
// reused once it returns).
//
//   HostStaging staging;                            // kept beside the state, reused
//   auto views = staging.stage({w, b});             // host bytes of w and b, valid together
//   HostStaging::write_back(w, image_bytes_of_w);   // restore
//
// Not thread-safe: one thread stages at a time, and views die with the next stage().
#include <cstddef>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace rf {
class DeviceRuntime;
}

namespace rf::ckpt {

class HostStaging {
 public:
  HostStaging() = default;
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // The host bytes of each tensor of `ts` (4 * numel each), all valid together until the
  // next stage() on this object or its destruction. A CPU tensor's view is its own memory
  // (it changes when the tensor does); another device's is a copy held here. Throws
  // rf::InvalidInput when tensors off the CPU are on two different devices (naming both).
  std::vector<std::span<const std::byte>> stage(std::span<const Tensor> ts);
  // Whether stage() copies t (t is not on the CPU) rather than viewing its memory.
  static bool copies(const Tensor& t) { return !(t.device() == Device::CPU); }
  // t's floats = `bytes` (exactly 4 * numel of them, else rf::InvalidInput).
  static void write_back(const Tensor& t, std::span<const std::byte> bytes);

  size_t capacity() const { return capacity_; }  // staging bytes held (0 for CPU-only states)

 private:
  void release();
  DeviceRuntime* rt_ = nullptr;  // whose host_staging data_ came from
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace rf::ckpt
