#include "ckpt/host_staging.h"

#include <cstring>

#include "base/error.h"
#include "base/str.h"
#include "core/device_runtime.h"

namespace rf::ckpt {
namespace {
constexpr size_t kAlign = 64;  // each copy starts on its own cache line
size_t bytes_of(const Tensor& t) { return sizeof(float) * static_cast<size_t>(t.numel()); }
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

HostStaging::~HostStaging() { release(); }

void HostStaging::release() {
  if (data_) rt_->free_host_staging(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  rt_ = nullptr;
}

std::vector<std::span<const std::byte>> HostStaging::stage(std::span<const Tensor> ts) {
  // Where the copies go: one block of the device's pinned memory, each tensor at its offset.
  const Tensor* first_off_cpu = nullptr;
  size_t need = 0;
  for (const Tensor& t : ts) {
    if (!copies(t)) continue;
    if (!first_off_cpu) first_off_cpu = &t;
    if (!(t.device() == first_off_cpu->device()))
      throw InvalidInput(str("state staging: tensors on two devices, ", device_name(first_off_cpu->device()), " and ",
                             device_name(t.device()), " (the state must be on one device besides the CPU)"));
    need += aligned(bytes_of(t));
  }
  if (first_off_cpu && need > 0) {
    DeviceRuntime& rt = runtime(first_off_cpu->device(), "state staging");
    if (&rt != rt_ || need > capacity_) {
      release();
      data_ = static_cast<std::byte*>(rt.host_staging(need));
      capacity_ = need;
      rt_ = &rt;
    }
  }
  std::vector<std::span<const std::byte>> views;
  views.reserve(ts.size());
  size_t at = 0;
  for (const Tensor& t : ts) {
    const size_t n = bytes_of(t);
    if (!copies(t)) {
      views.emplace_back(reinterpret_cast<const std::byte*>(n ? t.data() : nullptr), n);
      continue;
    }
    if (n) rt_->read(data_ + at, t.data(), n);
    views.emplace_back(data_ + at, n);
    at += aligned(n);
  }
  return views;
}

void HostStaging::write_back(const Tensor& t, std::span<const std::byte> bytes) {
  if (bytes.size() != bytes_of(t))
    throw InvalidInput(str("state staging: ", bytes.size(), " bytes for a tensor of ", bytes_of(t)));
  if (bytes.empty()) return;
  if (!copies(t)) {
    std::memcpy(t.data(), bytes.data(), bytes.size());
    return;
  }
  runtime(t.device(), "state restore").write(t.data(), bytes.data(), bytes.size());
}

}  // namespace rf::ckpt
