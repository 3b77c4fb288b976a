// The CPU's DeviceRuntime and the runtime registry (core/device_runtime.h).
//
// On the CPU every op is done when its entry returns, so the stream is null, copies are
// memcpy and fences have nothing to wait for; the waits are still counted, so a test can
// prove that a step asks for none.
#include <array>
#include <atomic>
#include <cstring>

#include "base/error.h"
#include "base/str.h"
#include "core/allocator.h"
#include "core/device_runtime.h"
#include "kernels/cpu/table.h"

namespace rf {

namespace {

class CpuRuntime final : public DeviceRuntime {
 public:
  Device device() const override { return Device::CPU; }
  const kernels::OpTable& ops() const override { return kernels::cpu_table(); }
  DeviceAllocator& allocator() override { return CachingAllocator::host(); }
  kernels::Stream stream() const override { return nullptr; }

  void write(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void read(void* dst, const void* src, size_t bytes) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    copy(dst, src, bytes);
  }
  void read_async(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void record(Fence& f) override { ++f.serial; }
  void wait(Fence&) override { fence_waits_.fetch_add(1, std::memory_order_relaxed); }
  void synchronize() override { synchronize_.fetch_add(1, std::memory_order_relaxed); }

  void* host_staging(size_t bytes) override { return allocator().allocate(bytes); }
  void free_host_staging(void* p, size_t bytes) override { allocator().release(p, bytes); }

  SyncCounts sync_counts() const override {
    return {synchronize_.load(std::memory_order_relaxed), reads_.load(std::memory_order_relaxed),
            fence_waits_.load(std::memory_order_relaxed)};
  }

 private:
  static void copy(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  std::atomic<int64_t> synchronize_{0}, reads_{0}, fence_waits_{0};
};

CpuRuntime& cpu_runtime() {
  // Never destroyed: tensors released during static destruction still reach its allocator.
  static CpuRuntime* instance = new CpuRuntime();
  return *instance;
}

// Installed runtimes: overrides (RuntimeOverride). An empty CPU slot falls back to the CPU
// runtime, an empty CUDA slot to the CUDA provider (set_cuda_runtime_provider).
constexpr int kMaxCuda = 16;
struct Registry {
  DeviceRuntime* cpu = nullptr;
  std::array<DeviceRuntime*, kMaxCuda> cuda{};
  std::atomic<CudaRuntimeProvider> cuda_provider{nullptr};
};
Registry& registry() {
  static Registry r;
  return r;
}

DeviceRuntime** slot(Device d) {
  Registry& r = registry();
  if (d.kind == DeviceKind::CPU) return d.index == 0 ? &r.cpu : nullptr;
  return d.index >= 0 && d.index < kMaxCuda ? &r.cuda[static_cast<size_t>(d.index)] : nullptr;
}

// RINGFENCE_HAVE_CUDA is defined for this file by core/CMakeLists.txt.
#if RINGFENCE_HAVE_CUDA
constexpr const char* kNoCudaProvider = "this program did not register the CUDA runtime (rf::register_cuda_runtime, "
                                        "core/cuda_runtime.h)";
#else
constexpr const char* kNoCudaProvider = "this build has no CUDA (no nvcc was found when it was configured)";
#endif

}  // namespace

DeviceRuntime& runtime(Device device, const char* what) {
  if (DeviceRuntime** s = slot(device)) {
    if (*s) return **s;
    if (device.kind == DeviceKind::CPU) return cpu_runtime();
  }
  if (device.kind == DeviceKind::CUDA) {
    if (CudaRuntimeProvider provider = registry().cuda_provider.load(std::memory_order_acquire))
      return provider(device.index, what);
    throw Error(str(what ? str("'", what, "': ") : std::string(), device_name(device), ": ", kNoCudaProvider));
  }
  throw Error(str(what ? str("'", what, "': ") : std::string(), "no runtime for device ", device_name(device),
                  " in this build"));
}

void set_cuda_runtime_provider(CudaRuntimeProvider provider) {
  registry().cuda_provider.store(provider, std::memory_order_release);
}

RuntimeOverride::RuntimeOverride(DeviceRuntime& replacement) : device_(replacement.device()) {
  DeviceRuntime** s = slot(device_);
  if (!s) throw InvalidInput(str("RuntimeOverride: no runtime slot for device ", device_name(device_)));
  previous_ = *s;
  *s = &replacement;
}

RuntimeOverride::~RuntimeOverride() { *slot(device_) = previous_; }

}  // namespace rf
