// The fake CUDA runtime, part 1: devices, contexts, memory and errors. Device memory is
// host memory; each device's live bytes are counted (cudaMemGetInfo,
// rf_fake_cuda_live_bytes) so a test can see memory that is never given back. Streams,
// events and the asynchronous calls are in fake_cudart_streams.cpp.
//
// Every function has the real header's signature (cuda_runtime.h is included, and the
// definitions are checked against its declarations) and C linkage.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "tests/nccl_double/fake_cuda_internal.h"
#include "tests/nccl_double/fake_cudart_state.h"
#include "tests/nccl_double/fake_hooks.h"

namespace rf_fake_cuda {

namespace {

constexpr int kMaxDevices = 32;
constexpr size_t kTotalBytes = size_t(16) << 30;  // what cudaMemGetInfo says a device has

struct Block {
  size_t bytes = 0;
  int device = 0;
  bool pinned_host = false;
};

struct Memory {
  std::mutex mu;
  std::map<uintptr_t, Block> blocks;  // by start address
  std::atomic<long long> live[kMaxDevices] = {};
  std::atomic<long long> pinned{0};
};
// Never destroyed: stream threads may still run while the process exits.
Memory& memory() {
  static Memory* m = new Memory;
  return *m;
}

std::atomic<unsigned> g_contexts{0};

void* allocate(size_t bytes) {
  const size_t size = (bytes + 255) / 256 * 256;
  return std::aligned_alloc(256, size == 0 ? 256 : size);
}

// The block `p` starts (for cudaFree); false when `p` starts none of that kind.
bool take_block(void* p, bool pinned, Block& out) {
  Memory& m = memory();
  std::lock_guard lk(m.mu);
  auto it = m.blocks.find(reinterpret_cast<uintptr_t>(p));
  if (it == m.blocks.end() || it->second.pinned_host != pinned) return false;
  out = it->second;
  m.blocks.erase(it);
  return true;
}

cudaError_t alloc_block(void** p, size_t bytes, bool pinned, const char* call) {
  if (cudaError_t e = detail::enter(call); e != cudaSuccess) return e;
  if (p == nullptr) return detail::fail(cudaErrorInvalidValue, call);
  void* mem = allocate(bytes);
  if (mem == nullptr) return detail::fail(cudaErrorMemoryAllocation, call);
  Memory& m = memory();
  {
    std::lock_guard lk(m.mu);
    m.blocks[reinterpret_cast<uintptr_t>(mem)] = Block{bytes, detail::tl_device, pinned};
  }
  if (pinned) m.pinned += static_cast<long long>(bytes);
  else m.live[detail::tl_device] += static_cast<long long>(bytes);
  *p = mem;
  return cudaSuccess;
}

cudaError_t free_block(void* p, bool pinned, const char* call) {
  if (cudaError_t e = detail::enter(call); e != cudaSuccess) return e;
  if (p == nullptr) return cudaSuccess;
  Block b;
  {
    // Not removed yet: the implicit synchronization comes first (CUDA's order).
    Memory& m = memory();
    std::lock_guard lk(m.mu);
    auto it = m.blocks.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.blocks.end() || it->second.pinned_host != pinned) {
      std::fprintf(stderr, "fake-cuda: %s(%p): not a live %s block (double free, or the wrong call)\n", call, p,
                   pinned ? "pinned host" : "device");
      return detail::fail(cudaErrorInvalidValue, call);
    }
    b = it->second;
  }
  detail::sync_device(pinned ? detail::tl_device : b.device);
  if (!take_block(p, pinned, b)) return detail::fail(cudaErrorInvalidValue, call);  // freed meanwhile
  Memory& m = memory();
  if (pinned) m.pinned -= static_cast<long long>(b.bytes);
  else m.live[b.device] -= static_cast<long long>(b.bytes);
  std::free(p);
  return cudaSuccess;
}

}  // namespace

// ---- shared state --------------------------------------------------------------------

int detail::device_count() {
  static const int n = [] {
    const char* v = std::getenv("RF_FAKE_CUDA_DEVICES");
    const int d = v ? std::atoi(v) : 4;
    return d < 1 ? 1 : (d > kMaxDevices ? kMaxDevices : d);
  }();
  return n;
}

void detail::make_context(int device) { g_contexts.fetch_or(1u << device, std::memory_order_relaxed); }

cudaError_t detail::fail(cudaError_t e, const char* call) {
  tl_last_error = e;
  if (std::getenv("RF_FAKE_NCCL_LOG") != nullptr) std::fprintf(stderr, "fake-cuda: %s -> %s\n", call, cudaGetErrorName(e));
  return e;
}

cudaError_t detail::enter(const char* call) {
  if (tl_in_callback) {
    std::fprintf(stderr, "fake-cuda: %s called from a host callback (CUDA forbids it)\n", call);
    return fail(cudaErrorNotPermitted, call);
  }
  make_context(tl_device);
  return cudaSuccess;
}

// ---- internal API ----------------------------------------------------------------------

int current_device() { return detail::tl_device; }

void bind_thread(int device) {
  detail::tl_device = device;
  detail::make_context(device);
}

MemKind memory_kind(const void* p, size_t bytes, int* device) {
  Memory& m = memory();
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lk(m.mu);
  auto it = m.blocks.upper_bound(at);
  if (it == m.blocks.begin()) return MemKind::pageable;
  --it;
  if (at < it->first || at + bytes > it->first + it->second.bytes) return MemKind::pageable;
  if (device) *device = it->second.device;
  return it->second.pinned_host ? MemKind::pinned_host : MemKind::device_memory;
}

void account(int device, long long bytes) { memory().live[device] += bytes; }

}  // namespace rf_fake_cuda

using namespace rf_fake_cuda;

// ---- hooks -------------------------------------------------------------------------------

extern "C" unsigned rf_fake_cuda_contexts(void) { return g_contexts.load(); }
extern "C" void rf_fake_cuda_reset_contexts(void) { g_contexts.store(0); }
extern "C" size_t rf_fake_cuda_live_bytes(int device) {
  if (device < 0 || device >= detail::device_count()) return 0;
  return static_cast<size_t>(memory().live[device].load());
}
extern "C" size_t rf_fake_cuda_pinned_bytes(void) { return static_cast<size_t>(memory().pinned.load()); }

// ---- devices -----------------------------------------------------------------------------

extern "C" cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return detail::fail(cudaErrorInvalidValue, "cudaGetDeviceCount");
  *count = detail::device_count();
  return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return detail::fail(cudaErrorInvalidValue, "cudaGetDevice");
  *device = detail::tl_device;
  return cudaSuccess;
}

// CUDA 12+: makes the device's primary context at once.
extern "C" cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= detail::device_count()) return detail::fail(cudaErrorInvalidDevice, "cudaSetDevice");
  if (detail::tl_in_callback) return detail::fail(cudaErrorNotPermitted, "cudaSetDevice");
  detail::tl_device = device;
  detail::make_context(device);
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  if (cudaError_t e = detail::enter("cudaMemGetInfo"); e != cudaSuccess) return e;
  const long long live = memory().live[detail::tl_device].load();
  if (free_bytes) *free_bytes = kTotalBytes - static_cast<size_t>(live < 0 ? 0 : live);
  if (total) *total = kTotalBytes;
  return cudaSuccess;
}

// ---- memory ------------------------------------------------------------------------------

extern "C" cudaError_t cudaMalloc(void** p, size_t bytes) { return alloc_block(p, bytes, false, "cudaMalloc"); }
extern "C" cudaError_t cudaFree(void* p) { return free_block(p, false, "cudaFree"); }
extern "C" cudaError_t cudaMallocHost(void** p, size_t bytes) { return alloc_block(p, bytes, true, "cudaMallocHost"); }
extern "C" cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  return alloc_block(p, bytes, true, "cudaHostAlloc");
}
extern "C" cudaError_t cudaFreeHost(void* p) { return free_block(p, true, "cudaFreeHost"); }

// ---- errors ------------------------------------------------------------------------------

namespace {

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* find_error(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

}  // namespace

extern "C" const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* t = find_error(e);
  return t ? t->name : "cudaErrorUnknown";
}
extern "C" const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* t = find_error(e);
  return t ? t->text : "unrecognized error code";
}
extern "C" cudaError_t cudaGetLastError(void) {
  const cudaError_t e = detail::tl_last_error;
  detail::tl_last_error = cudaSuccess;
  return e;
}
extern "C" cudaError_t cudaPeekAtLastError(void) { return detail::tl_last_error; }
