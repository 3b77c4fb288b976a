#pragma once
// DeviceRuntime — what core needs from a device besides arithmetic: its op table
// (kernels/op_table.h), memory from its caching allocator, the stream ops run on, copies
// to and from the host, and synchronisation. One runtime per device; runtime(device)
// finds it and throws rf::Error naming the device when it has none. The CPU's is always
// there; CUDA's come from a provider a program installs with rf::register_cuda_runtime()
// (core/cuda_runtime.h, library rf_core_cuda), so only programs that want a GPU link CUDA.
//
// Synchronisation is explicit. Nothing on the step path waits for the device: an op only
// enqueues. The host waits in three places only, and the runtime counts each (SyncCounts),
// so a test with a counting runtime can prove a step has no hidden synchronisation:
//   * synchronize(): everything issued so far (a full device synchronisation);
//   * read(): a blocking copy to the host (Tensor::item, a digest, a checkpoint image);
//   * wait(fence): one recorded point of the stream, for a small asynchronous copy
//     (the reducer's control block) — not a full synchronisation.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "kernels/exec.h"

namespace rf::kernels {
struct OpTable;
}

namespace rf {

// A device's memory, cached: freed blocks are kept for the next request of that size, so
// after the first step nothing is allocated from the system (core/allocator.h).
class DeviceAllocator : public kernels::Scratch {
 public:
  struct Stats {
    size_t fresh_blocks = 0;   // blocks obtained from the system
    size_t reused_blocks = 0;  // requests met from the cache
    size_t cached_bytes = 0;   // free bytes held in the cache
    size_t live_bytes = 0;     // bytes handed out and not yet released
  };
  // 64-byte aligned. Out of memory throws: std::bad_alloc for host memory, rf::Error
  // naming the device for a device's own.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
  virtual Stats stats() const = 0;
  virtual void empty_cache() = 0;
  void* get(size_t bytes) override { return allocate(bytes); }
  void put(void* p, size_t bytes) override { release(p, bytes); }
};

// A point in a stream's work (record), waited for alone (wait).
struct Fence {
  void* native = nullptr;  // cudaEvent_t on CUDA; unused on the CPU
  uint64_t serial = 0;     // how many times it was recorded
};

struct SyncCounts {
  int64_t synchronize = 0;  // full synchronisations
  int64_t reads = 0;        // blocking copies to the host
  int64_t fence_waits = 0;  // waits for one recorded point
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device device() const = 0;
  virtual const kernels::OpTable& ops() const = 0;
  virtual DeviceAllocator& allocator() = 0;
  virtual kernels::Stream stream() const = 0;
  kernels::Exec exec() { return {stream(), &allocator()}; }

  // dst (device) = src (host), ordered on stream(); src may be reused once it returns.
  virtual void write(void* dst, const void* src, size_t bytes) = 0;
  // dst (host) = src (device) after everything issued before it: blocks. Counted.
  virtual void read(void* dst, const void* src, size_t bytes) = 0;
  // Starts dst (host) = src (device) on stream(); dst is valid after wait() of a fence
  // recorded after it. dst should be host memory from host_staging() (pinned on CUDA).
  virtual void read_async(void* dst, const void* src, size_t bytes) = 0;
  virtual void record(Fence& f) = 0;
  virtual void wait(Fence& f) = 0;  // counted
  virtual void synchronize() = 0;   // counted

  // Host memory the device copies to and from at full speed (pinned on CUDA, ordinary
  // memory on the CPU). Freed with free_host_staging.
  virtual void* host_staging(size_t bytes) = 0;
  virtual void free_host_staging(void* p, size_t bytes) = 0;

  virtual SyncCounts sync_counts() const = 0;
};

// The runtime of `device`; throws rf::Error naming the device (and `what` asked for it)
// when the device has none in this build or on this machine.
DeviceRuntime& runtime(Device device, const char* what = nullptr);
inline const kernels::OpTable& ops_for(Device device, const char* what = nullptr);

// Where runtime(cuda:i, what) gets device i's runtime when no override is installed:
// returns it or throws rf::Error naming `what` and the device (no such GPU). Installed by
// register_cuda_runtime (core/cuda_runtime.h); null uninstalls it.
using CudaRuntimeProvider = DeviceRuntime& (*)(int index, const char* what);
void set_cuda_runtime_provider(CudaRuntimeProvider provider);

// Test seam: while alive, runtime(device of `replacement`) returns `replacement` (e.g. a
// counting wrapper around the CPU runtime). Not thread-safe against concurrent runtime()
// calls from other threads; install it before the work under test starts.
class RuntimeOverride {
 public:
  explicit RuntimeOverride(DeviceRuntime& replacement);
  ~RuntimeOverride();
  RuntimeOverride(const RuntimeOverride&) = delete;
  RuntimeOverride& operator=(const RuntimeOverride&) = delete;

 private:
  Device device_;
  DeviceRuntime* previous_;
};

inline const kernels::OpTable& ops_for(Device device, const char* what) { return runtime(device, what).ops(); }

}  // namespace rf
