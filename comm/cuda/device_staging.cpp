// stage_device_buffers (comm/cuda/device_staging.h): the staging communicator
// (comm/staging/staging_communicator.h) over CUDA — the process's pool of pinned staging slots
// (chosen by the pure StagingSlots, comm/staging/staging_slots.h) and the copies and marks
// on the caller's stream. Every CUDA call is checked; an error names the device and call.
#include "comm/cuda/device_staging.h"

#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "comm/staging/staging_communicator.h"
#include "comm/staging/staging_slots.h"
#include "comm/shm/shared_buffer.h"

namespace rf::comm::cuda {

namespace {

[[noreturn]] void fail_cuda(int device, cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  throw rf::Error(rf::str("cuda:", device, ": ", call, " failed (", file, ":", line, "): ", cudaGetErrorName(e), " (",
                          cudaGetErrorString(e), ")"));
}
#define RF_STAGING_CHECK(device, call)                                               \
  do {                                                                               \
    const cudaError_t rf_e_ = (call);                                                \
    if (rf_e_ != cudaSuccess) fail_cuda((device), rf_e_, #call, __FILE__, __LINE__); \
  } while (0)

void make_current(int device) {
  int now = -1;
  RF_STAGING_CHECK(device, cudaGetDevice(&now));
  if (now != device) RF_STAGING_CHECK(device, cudaSetDevice(device));
}

// Pinned staging the processes of one host can map: a SharedBuffer (memfd) page-locked with
// cudaHostRegister and named as the inner Buffer's `registered`, so the UCX backend's
// same-host zero-copy path reduces straight from the peers' staging (one read of each
// peer's segment, no ring messages: the path ddp's host buckets take). Why it pays: the
// staged all-reduce is a host all-reduce between two PCIe copies, and on host memory the
// zero-copy path gains 1.9-2.9x (W = 2) and 2.1-4.9x (W = 4) busbw over plain memory from
// 256 KiB (bench/RESULTS.md, "Communication"); page-locking changes nothing for the peers,
// who read the memfd through their own mappings. Not measured on a GPU here. When
// registering fails (or there is no memfd), cudaMallocHost memory: pinned, private, the
// ring's path.
struct Slot {
  int device = 0;
  size_t capacity = 0;
  std::unique_ptr<SharedBuffer> shared;  // page-locked with cudaHostRegister, or null
  void* pinned = nullptr;                // cudaMallocHost'd when `shared` is null
  cudaEvent_t copied_in = nullptr;       // after the D2H copy into the slot
  cudaEvent_t released = nullptr;        // after the H2D copy out of it: the next D2H waits for it
  // The last copy in had no copy out after it (its collective failed or was abandoned): that
  // D2H may still be in flight, so the next one waits for `copied_in` too.
  bool unreleased = false;

  void* data() const { return shared ? shared->data() : pinned; }
  const RegisteredMemory* registered() const { return shared && shared->shared() ? shared.get() : nullptr; }

  Slot(int dev, size_t bytes) : device(dev), capacity(bytes) {
    make_current(device);
    try {
      shared = std::make_unique<SharedBuffer>(capacity);  // resident: no page fault later
      if (cudaHostRegister(shared->data(), capacity, cudaHostRegisterPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        shared.reset();
      }
    } catch (const rf::Error&) {
      shared.reset();
    }
    try {
      if (!shared) RF_STAGING_CHECK(device, cudaMallocHost(&pinned, capacity));
      RF_STAGING_CHECK(device, cudaEventCreateWithFlags(&copied_in, cudaEventDisableTiming));
      RF_STAGING_CHECK(device, cudaEventCreateWithFlags(&released, cudaEventDisableTiming));
    } catch (...) {
      free_all();
      throw;
    }
  }
  ~Slot() { free_all(); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

  // Evicted (free) slots and failed constructions: the last copies into and out of the
  // slot may still be queued, so wait for them before the memory goes (eviction is rare).
  void free_all() {
    if (copied_in) (void)cudaEventSynchronize(copied_in);
    if (released) (void)cudaEventSynchronize(released);
    if (copied_in) (void)cudaEventDestroy(copied_in);
    if (released) (void)cudaEventDestroy(released);
    if (shared) (void)cudaHostUnregister(shared->data());
    if (pinned) (void)cudaFreeHost(pinned);
    (void)cudaGetLastError();
    copied_in = released = nullptr;
    shared.reset();
    pinned = nullptr;
  }
};

// The process's staging, shared by every communicator of every generation (the memory
// belongs to no communicator, as registered memory does not). Never destroyed, like the
// CUDA runtimes: no CUDA call after the driver began to shut down.
class Pool {
 public:
  static Pool& instance() {
    static Pool* pool = new Pool;
    return *pool;
  }
  struct Lease {
    int index = -1;
    Slot* slot = nullptr;
  };
  Lease take(const StagingKey& key) {
    std::lock_guard<std::mutex> lk(mu_);
    StagingSlots::Pick p = slots_.take(key);
    for (int i : p.evict) mem_[static_cast<size_t>(i)].reset();
    if (p.slot >= 0) return Lease{p.slot, mem_[static_cast<size_t>(p.slot)].get()};
    auto slot = std::make_unique<Slot>(key.device, staging_capacity(key.bytes));
    const int i = slots_.add(key);
    if (mem_.size() <= static_cast<size_t>(i)) mem_.resize(static_cast<size_t>(i) + 1);
    mem_[static_cast<size_t>(i)] = std::move(slot);
    return Lease{i, mem_[static_cast<size_t>(i)].get()};
  }
  void give(const Lease& l) {
    std::lock_guard<std::mutex> lk(mu_);
    slots_.give(l.index);
  }

 private:
  // Pinned host memory this process keeps for staging at most (more only while every slot
  // is in use): a model's gradients, staged once per bucket, fit in it.
  static constexpr size_t kBudget = size_t{4} << 30;
  std::mutex mu_;
  StagingSlots slots_{kBudget};
  std::vector<std::unique_ptr<Slot>> mem_;
};

// The device's part of the staging communicator, on CUDA: the process's pool, copies with
// cudaMemcpyAsync, marks as cudaEvents (the next copy in waits for `released` with
// cudaStreamWaitEvent: no host wait), polls with cudaEventQuery.
class CudaCopies final : public DeviceCopies {
 public:
  explicit CudaCopies(int device) : device_(device) {}
  int device() const override { return device_; }
  void make_current() override { cuda::make_current(device_); }
  StagingLease take(const StagingKey& key) override {
    const Pool::Lease l = Pool::instance().take(key);
    StagingLease s;
    s.index = l.index;
    s.host = l.slot->data();
    s.registered = l.slot->registered();
    s.slot = l.slot;
    return s;
  }
  void give(const StagingLease& lease) override { Pool::instance().give(Pool::Lease{lease.index, slot(lease)}); }
  void copy_in(const StagingLease& lease, const void* src, size_t bytes, bool copy, Stream stream) override {
    Slot* s = slot(lease);
    const auto st = static_cast<cudaStream_t>(stream);
    RF_STAGING_CHECK(device_, cudaStreamWaitEvent(st, s->released, 0));
    if (s->unreleased) RF_STAGING_CHECK(device_, cudaStreamWaitEvent(st, s->copied_in, 0));
    if (copy) RF_STAGING_CHECK(device_, cudaMemcpyAsync(s->data(), src, bytes, cudaMemcpyDeviceToHost, st));
    RF_STAGING_CHECK(device_, cudaEventRecord(s->copied_in, st));
    s->unreleased = true;
  }
  bool copied_in(const StagingLease& lease) override {
    const cudaError_t e = cudaEventQuery(slot(lease)->copied_in);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    fail_cuda(device_, e, "cudaEventQuery(copied_in)", __FILE__, __LINE__);
  }
  void copy_out(const StagingLease& lease, void* dst, size_t bytes, bool copy, Stream stream) override {
    Slot* s = slot(lease);
    const auto st = static_cast<cudaStream_t>(stream);
    if (copy) RF_STAGING_CHECK(device_, cudaMemcpyAsync(dst, s->data(), bytes, cudaMemcpyHostToDevice, st));
    RF_STAGING_CHECK(device_, cudaEventRecord(s->released, st));
    s->unreleased = false;
  }

 private:
  static Slot* slot(const StagingLease& l) { return static_cast<Slot*>(l.slot); }
  int device_;
};

}  // namespace

std::shared_ptr<Communicator> stage_device_buffers(std::shared_ptr<Communicator> host, const CommOptions& o) {
  if (!host) throw rf::InvalidInput("stage_device_buffers: no host communicator to wrap");
  if (o.device != Device::cuda)
    throw rf::InvalidInput("stage_device_buffers: CommOptions::device must be cuda (host buffers need no staging)");
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw rf::InvalidInput(rf::str("stage_device_buffers: cuda:", o.device_index, ": no CUDA device on this machine (",
                                   cudaGetErrorName(e), ")"));
  }
  if (o.device_index < 0 || o.device_index >= count)
    throw rf::InvalidInput(rf::str("stage_device_buffers: cuda:", o.device_index, ": this machine has ", count, " GPU",
                                   count == 1 ? "" : "s"));
  return make_staging_communicator(std::move(host), std::make_shared<CudaCopies>(o.device_index));
}

}  // namespace rf::comm::cuda
