// The CUDA DeviceRuntime and its provider (core/cuda_runtime.h). Compiled into
// rf_core_cuda only when the build has CUDA; core/cuda_runtime_none.cpp stands in otherwise.
#include "core/cuda_runtime.h"
#include "core/cuda_pool.h"
#include "core/free_lists.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "core/device.h"
#include "core/device_runtime.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/table.h"

namespace rf {

namespace {

constexpr int kMaxDevices = 16;  // the registry's CUDA slots (core/cpu_runtime.cpp)

// ---- which GPUs there are, asked once ----

struct Visible {
  int count = 0;
  std::string reason;  // why count is 0
};
const Visible& visible() {
  static const Visible v = [] {
    Visible r;
    const cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky, but leave no error behind for the next call
      r.count = 0;
      r.reason = str("cudaGetDeviceCount: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    } else if (r.count == 0) {
      r.reason = "cudaGetDeviceCount found none";
    }
    return r;
  }();
  return v;
}

// Makes `index` the calling thread's current device (a kernel is launched on the current
// device, which must be its stream's).
void make_current(int index) {
  int now = -1;
  RF_CUDA_CHECK(cudaGetDevice(&now));
  if (now != index) RF_CUDA_CHECK(cudaSetDevice(index));
}

// ---- cached blocks: FreeLists (core/free_lists.h) over a CUDA allocator ----

class BlockCache {
 public:
  using Alloc = cudaError_t (*)(void**, size_t);
  using Free = cudaError_t (*)(void*);
  BlockCache(std::string name, Alloc a, Free f) : name_(std::move(name)), alloc_(a), free_fn_(f) {}

  void* allocate(size_t bytes) {
    const size_t n = FreeLists::round(bytes);
    if (void* p = lists_.take(n)) return p;
    void* p = obtain(n, true);
    lists_.note_fresh(n);
    return p;
  }
  // A block of rounded size n from the system, not counted in this cache's statistics.
  // may_empty: when the system has none, free the cache and try once more (cudaFree: never
  // during a capture, core/cuda_graph.h).
  void* obtain(size_t n, bool may_empty) {
    void* p = nullptr;
    cudaError_t e = alloc_(&p, n);
    if (e == cudaErrorMemoryAllocation && may_empty) {  // give the cache back to the system, try once more
      (void)cudaGetLastError();
      empty();
      e = alloc_(&p, n);
    }
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw Error(str(name_, ": out of memory allocating ", n, " bytes (", lists_.stats().live_bytes, " bytes live)"));
    }
    RF_CUDA_CHECK(e);
    return p;
  }
  void release(void* p, size_t bytes) {
    if (p) lists_.put(p, FreeLists::round(bytes));
  }
  DeviceAllocator::Stats stats() const { return lists_.stats(); }
  // Frees every cached block (cudaFree waits for the device: never on the step path).
  void empty() {
    lists_.drain([this](void* p) { RF_CUDA_CHECK(free_fn_(p)); });
  }

 private:
  std::string name_;
  Alloc alloc_;
  Free free_fn_;
  FreeLists lists_;
};

cudaError_t device_malloc(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t device_free(void* p) { return cudaFree(p); }
cudaError_t pinned_malloc(void** p, size_t n) { return cudaMallocHost(p, n); }
cudaError_t pinned_free(void* p) { return cudaFreeHost(p); }

// Device memory (cudaMalloc aligns to 256 bytes). Blocks released while work on them is
// still queued are safe to hand out again: the next user's work is on the same stream,
// after it. Work on another stream must be ordered with this one before it releases.
//
// The private pool (core/cuda_pool.h, for core/cuda_graph.h): while it is open, the
// opening thread's allocations come from the pool's own free lists, or fresh from the
// system, and the block is the pool's; a pool block released (by any thread) goes back to
// the pool, never to the cache, so only a capture hands it out again.
class CudaAllocator final : public DeviceAllocator {
 public:
  CudaAllocator(int index, std::string name) : index_(index), cache_(std::move(name), device_malloc, device_free) {}
  void* allocate(size_t bytes) override {
    make_current(index_);
    if (pool_open_.load(std::memory_order_acquire) && pool_thread_ == std::this_thread::get_id()) {
      const size_t n = FreeLists::round(bytes);
      if (void* p = pool_.take(n)) return p;
      void* p = obtain_while_capturing(n);
      pool_.note_fresh(n);
      std::lock_guard<std::mutex> lock(pool_mu_);
      pool_blocks_.insert(p);
      return p;
    }
    return cache_.allocate(bytes);
  }
  void release(void* p, size_t bytes) override {
    if (p && pool_has_blocks_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(pool_mu_);
      if (pool_blocks_.count(p)) {
        pool_.put(p, FreeLists::round(bytes));
        return;
      }
    }
    cache_.release(p, bytes);
  }
  Stats stats() const override {
    Stats a = cache_.stats();
    const Stats b = pool_.stats();
    a.fresh_blocks += b.fresh_blocks;
    a.reused_blocks += b.reused_blocks;
    a.cached_bytes += b.cached_bytes;
    a.live_bytes += b.live_bytes;
    return a;
  }
  void empty_cache() override {
    make_current(index_);
    cache_.empty();
  }

  // cudaMalloc is a "potentially unsafe" call that a ThreadLocal capture refuses (it is not
  // a stream operation, so the graph does not record it). Here it is safe: the block is the
  // pool's until the graph is reset, so every replay finds it where the capture saw it. The
  // thread's capture mode is Relaxed for this call only. No cudaFree to make room: that
  // would break the capture.
  void* obtain_while_capturing(size_t n) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RF_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    void* p = nullptr;
    try {
      p = cache_.obtain(n, false);
    } catch (...) {
      (void)cudaThreadExchangeStreamCaptureMode(&mode);
      throw;
    }
    RF_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    return p;
  }

  // The pool belongs to one graph (owner) from its first capture to its reset: another
  // graph's capture would reuse blocks the first one still writes.
  void open_pool(const void* owner) {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (pool_owner_ && pool_owner_ != owner)
      throw Error(str(device_name(Device::cuda(index_)), ": another CUDA graph holds the device's graph pool"));
    if (pool_open_.load()) throw Error(str(device_name(Device::cuda(index_)), ": a graph is being captured already"));
    pool_owner_ = owner;
    pool_thread_ = std::this_thread::get_id();
    pool_has_blocks_.store(true, std::memory_order_release);
    pool_open_.store(true, std::memory_order_release);
  }
  void close_pool() { pool_open_.store(false, std::memory_order_release); }
  // The pool's free blocks go back to the system (cudaFree waits for the device: at a
  // graph's reset, never during a capture); blocks still held stay the pool's.
  void drain_pool(const void* owner) {
    make_current(index_);
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (pool_owner_ != owner) return;
    pool_owner_ = nullptr;
    pool_.drain([this](void* p) {
      pool_blocks_.erase(p);
      RF_CUDA_CHECK(cudaFree(p));
    });
  }

 private:
  int index_;
  BlockCache cache_;
  FreeLists pool_;
  std::mutex pool_mu_;
  std::unordered_set<void*> pool_blocks_;  // every block of the pool, free or held
  std::atomic<bool> pool_open_{false};
  std::atomic<bool> pool_has_blocks_{false};  // ever opened: releases look the block up
  std::thread::id pool_thread_;
  const void* pool_owner_ = nullptr;  // under pool_mu_
};

class CudaRuntime final : public DeviceRuntime {
 public:
  explicit CudaRuntime(int index)
      : index_(index),
        name_(device_name(Device::cuda(index))),
        allocator_(index, name_),
        pinned_(name_ + " pinned staging", pinned_malloc, pinned_free) {
    make_current(index_);
    RF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  // Never destroyed (the runtimes live for the process, like the CPU's): tensors released
  // during static destruction still reach the allocator, and no CUDA call runs after the
  // driver has begun to shut down.

  Device device() const override { return Device::cuda(index_); }
  const kernels::OpTable& ops() const override { return kernels::cuda_table(); }
  DeviceAllocator& allocator() override { return allocator_; }
  CudaAllocator& cuda_allocator() { return allocator_; }
  kernels::Stream stream() const override {
    make_current(index_);  // the caller launches next: on this device
    return stream_;
  }

  // The source is copied into a pinned staging slot before this returns, so it may be
  // reused at once whatever memory it is (pageable or pinned). A slot is reused once its
  // copy has finished; when every slot is still queued the host waits for the oldest
  // (back-pressure on a host far ahead of the device), never for the whole stream.
  void write(void* dst, const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(write_mu_);
    make_current(index_);
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    while (bytes > 0) {
      const size_t n = bytes < kSlotBytes ? bytes : kSlotBytes;
      Slot& slot = next_slot();
      std::memcpy(slot.host, s, n);
      RF_CUDA_CHECK(cudaMemcpyAsync(d, slot.host, n, cudaMemcpyHostToDevice, stream_));
      RF_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
      slot.queued = true;
      d += n;
      s += n;
      bytes -= n;
    }
  }
  void read(void* dst, const void* src, size_t bytes) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    if (bytes == 0) return;
    make_current(index_);
    RF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    RF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // Asynchronous only into pinned memory (host_staging); into pageable memory CUDA
  // completes the copy before returning.
  void read_async(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    make_current(index_);
    RF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  // A Fence's event is made at its first record and lives as long as the process (the
  // runtime keeps it): fences are meant to be long-lived (one per reducer).
  void record(Fence& f) override {
    make_current(index_);
    if (!f.native) {
      cudaEvent_t e = nullptr;
      RF_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      std::lock_guard<std::mutex> lock(events_mu_);
      events_.push_back(e);
      f.native = e;
    }
    RF_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(f.native), stream_));
    ++f.serial;
  }
  void wait(Fence& f) override {
    fence_waits_.fetch_add(1, std::memory_order_relaxed);
    if (!f.native) return;  // never recorded: nothing to wait for
    RF_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(f.native)));
  }
  void synchronize() override {
    synchronize_.fetch_add(1, std::memory_order_relaxed);
    make_current(index_);
    RF_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void* host_staging(size_t bytes) override { return pinned_.allocate(bytes); }
  void free_host_staging(void* p, size_t bytes) override { pinned_.release(p, bytes); }

  SyncCounts sync_counts() const override {
    return {synchronize_.load(std::memory_order_relaxed), reads_.load(std::memory_order_relaxed),
            fence_waits_.load(std::memory_order_relaxed)};
  }

 private:
  static constexpr size_t kSlotBytes = size_t{1} << 20;
  static constexpr int kSlots = 16;
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool queued = false;
  };
  // Under write_mu_. The slots are made at the first write.
  Slot& next_slot() {
    Slot& slot = slots_[static_cast<size_t>(next_)];
    next_ = (next_ + 1) % kSlots;
    if (!slot.host) {
      RF_CUDA_CHECK(cudaMallocHost(&slot.host, kSlotBytes));
      RF_CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
    } else if (slot.queued) {
      RF_CUDA_CHECK(cudaEventSynchronize(slot.done));
      slot.queued = false;
    }
    return slot;
  }

  int index_;
  std::string name_;
  CudaAllocator allocator_;
  BlockCache pinned_;
  cudaStream_t stream_ = nullptr;
  std::mutex write_mu_;
  std::array<Slot, kSlots> slots_{};
  int next_ = 0;
  std::mutex events_mu_;
  std::vector<cudaEvent_t> events_;
  std::atomic<int64_t> synchronize_{0}, reads_{0}, fence_waits_{0};
};

std::mutex& runtimes_mu() {
  static std::mutex m;
  return m;
}
std::array<std::atomic<CudaRuntime*>, kMaxDevices>& runtimes() {
  static std::array<std::atomic<CudaRuntime*>, kMaxDevices> r{};
  return r;
}

DeviceRuntime& provide(int index, const char* what) {
  const Visible& v = visible();
  if (index < 0 || index >= v.count || index >= kMaxDevices) {
    const std::string name = str(what ? str("'", what, "': ") : std::string(), device_name(Device::cuda(index)));
    if (v.count == 0) throw Error(str(name, ": no CUDA device on this machine (", v.reason, ")"));
    throw Error(str(name, ": no such CUDA device on this machine (", v.count, " found: cuda:0 to cuda:", v.count - 1,
                    ")"));
  }
  auto& slot = runtimes()[static_cast<size_t>(index)];
  if (CudaRuntime* r = slot.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(runtimes_mu());
  if (CudaRuntime* r = slot.load(std::memory_order_acquire)) return *r;
  auto* r = new CudaRuntime(index);  // never destroyed (see CudaRuntime)
  slot.store(r, std::memory_order_release);
  return *r;
}

}  // namespace

void register_cuda_runtime() { set_cuda_runtime_provider(provide); }

namespace cuda_pool {
void open(int index, const void* owner) {
  static_cast<CudaRuntime&>(provide(index, "graph capture")).cuda_allocator().open_pool(owner);
}
void close(int index) { static_cast<CudaRuntime&>(provide(index, "graph capture")).cuda_allocator().close_pool(); }
void drain(int index, const void* owner) {
  static_cast<CudaRuntime&>(provide(index, "graph capture")).cuda_allocator().drain_pool(owner);
}
}  // namespace cuda_pool
int cuda_device_count() { return visible().count; }
std::string cuda_unavailable_reason() { return visible().count > 0 ? std::string() : visible().reason; }

void cuda_profiler_range(bool on) {
  if (visible().count == 0) return;
  RF_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
}

}  // namespace rf
