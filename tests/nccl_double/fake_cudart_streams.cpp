// The fake CUDA runtime, part 2: streams, events and the asynchronous calls. A stream is
// a FIFO of tasks run in order by a thread of its own; a task that blocks (a spin, an NCCL
// kernel waiting for a peer) holds everything behind it, as on a GPU. The default stream
// (null, cudaStreamLegacy, cudaStreamPerThread) is one more FIFO per device, with none of
// the legacy stream's implicit synchronization.
//
// Events: each record is a new mark; the event is complete when its LATEST record is (a
// never-recorded event is complete). cudaStreamWaitEvent waits for the record that was
// latest when it was called.
#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tests/nccl_double/fake_cuda_internal.h"
#include "tests/nccl_double/fake_cudart_state.h"
#include "tests/nccl_double/fake_hooks.h"

struct CUstream_st {
  int device = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  unsigned long long enqueued = 0, done = 0;
  bool closing = false;  // destroyed: runs what it holds, then its thread ends
};

namespace {

struct Record {
  bool done = false;  // under Events::mu
};

}  // namespace

struct CUevent_st {
  int device = 0;
  std::shared_ptr<Record> latest;  // under Events::mu
};

namespace rf_fake_cuda {

namespace {

using StreamPtr = std::shared_ptr<CUstream_st>;

struct Streams {
  std::mutex mu;
  std::unordered_map<CUstream_st*, StreamPtr> live;
  std::unordered_map<int, StreamPtr> defaults;
};
struct Events {
  std::mutex mu;
  std::condition_variable cv;  // a record completed
  std::unordered_set<CUevent_st*> live;
};
struct Spins {
  std::mutex mu;
  std::condition_variable cv;
  unsigned long long generation = 0;
  int running = 0;
};
// Never destroyed: stream threads may still run while the process exits.
Streams& streams() {
  static Streams* s = new Streams;
  return *s;
}
Events& events() {
  static Events* e = new Events;
  return *e;
}
Spins& spins() {
  static Spins* s = new Spins;
  return *s;
}

void stream_main(StreamPtr s) {
  detail::tl_device = s->device;
  std::unique_lock lk(s->mu);
  for (;;) {
    s->cv.wait(lk, [&] { return !s->tasks.empty() || s->closing; });
    if (s->tasks.empty()) return;  // closing, and nothing left
    std::function<void()> task = std::move(s->tasks.front());
    s->tasks.pop_front();
    lk.unlock();
    task();
    lk.lock();
    ++s->done;
    s->cv.notify_all();
  }
}

StreamPtr make_stream(int device) {
  auto s = std::make_shared<CUstream_st>();
  s->device = device;
  std::thread(stream_main, s).detach();
  return s;
}

bool is_default(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread; }

StreamPtr find_stream(cudaStream_t s) {
  Streams& all = streams();
  std::lock_guard lk(all.mu);
  if (is_default(s)) {
    StreamPtr& d = all.defaults[detail::tl_device];
    if (!d) d = make_stream(detail::tl_device);
    return d;
  }
  auto it = all.live.find(s);
  return it == all.live.end() ? nullptr : it->second;
}

void push(CUstream_st& s, std::function<void()> task) {
  std::lock_guard lk(s.mu);
  s.tasks.push_back(std::move(task));
  ++s.enqueued;
  s.cv.notify_all();
}

void sync_stream(CUstream_st& s) {
  std::unique_lock lk(s.mu);
  const unsigned long long upto = s.enqueued;
  s.cv.wait(lk, [&] { return s.done >= upto; });
}

void wait_record(const std::shared_ptr<Record>& r) {
  if (!r) return;
  Events& ev = events();
  std::unique_lock lk(ev.mu);
  ev.cv.wait(lk, [&] { return r->done; });
}

// A call that enqueues on `s`: the context, then the stream (InvalidResourceHandle if gone).
cudaError_t stream_call(cudaStream_t s, const char* call, StreamPtr& out) {
  if (cudaError_t e = detail::enter(call); e != cudaSuccess) return e;
  out = find_stream(s);
  if (!out) {
    std::fprintf(stderr, "fake-cuda: %s on stream %p, which does not exist (destroyed?)\n", call, static_cast<void*>(s));
    return detail::fail(cudaErrorInvalidResourceHandle, call);
  }
  return cudaSuccess;
}

// The device side of a copy must lie inside one cudaMalloc block.
bool device_side_ok(const void* p, size_t bytes, const char* call, const char* which) {
  if (bytes == 0) return true;
  int device = -1;
  if (memory_kind(p, bytes, &device) == MemKind::device_memory) return true;
  std::fprintf(stderr, "fake-cuda: %s: %s %p (%zu bytes) is not inside a cudaMalloc block\n", call, which, p, bytes);
  return false;
}

bool copy_ok(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* call) {
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return false;
  return (!dst_dev || device_side_ok(dst, bytes, call, "dst")) && (!src_dev || device_side_ok(src, bytes, call, "src"));
}

}  // namespace

void detail::sync_device(int device) {
  std::vector<StreamPtr> of_device;
  {
    Streams& all = streams();
    std::lock_guard lk(all.mu);
    for (auto& [handle, s] : all.live)
      if (s->device == device) of_device.push_back(s);
    if (auto it = all.defaults.find(device); it != all.defaults.end()) of_device.push_back(it->second);
  }
  for (const StreamPtr& s : of_device) sync_stream(*s);
}

cudaError_t enqueue(cudaStream_t s, std::function<void()> body) {
  StreamPtr st = find_stream(s);
  if (!st) return cudaErrorInvalidResourceHandle;
  push(*st, std::move(body));
  return cudaSuccess;
}

int stream_device(cudaStream_t s) {
  StreamPtr st = find_stream(s);
  return st ? st->device : -1;
}

}  // namespace rf_fake_cuda

using namespace rf_fake_cuda;

// ---- streams -----------------------------------------------------------------------------

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  if (cudaError_t e = detail::enter("cudaStreamCreate"); e != cudaSuccess) return e;
  if (s == nullptr) return detail::fail(cudaErrorInvalidValue, "cudaStreamCreate");
  StreamPtr st = make_stream(detail::tl_device);
  {
    Streams& all = streams();
    std::lock_guard lk(all.mu);
    all.live[st.get()] = st;
  }
  *s = st.get();
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

// Allowed with work pending: that work still runs (CUDA's rule), then the thread ends.
extern "C" cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (cudaError_t e = detail::enter("cudaStreamDestroy"); e != cudaSuccess) return e;
  StreamPtr st;
  {
    Streams& all = streams();
    std::lock_guard lk(all.mu);
    auto it = all.live.find(s);
    if (it == all.live.end()) return detail::fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy");
    st = it->second;
    all.live.erase(it);
  }
  std::lock_guard lk(st->mu);
  st->closing = true;
  st->cv.notify_all();
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  StreamPtr st;
  if (cudaError_t e = stream_call(s, "cudaStreamSynchronize", st); e != cudaSuccess) return e;
  sync_stream(*st);
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamQuery(cudaStream_t s) {
  StreamPtr st;
  if (cudaError_t e = stream_call(s, "cudaStreamQuery", st); e != cudaSuccess) return e;
  std::lock_guard lk(st->mu);
  return st->done >= st->enqueued ? cudaSuccess : cudaErrorNotReady;
}

extern "C" cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t e = detail::enter("cudaDeviceSynchronize"); e != cudaSuccess) return e;
  detail::sync_device(detail::tl_device);
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  StreamPtr st;
  if (cudaError_t r = stream_call(s, "cudaStreamWaitEvent", st); r != cudaSuccess) return r;
  std::shared_ptr<Record> rec;
  {
    Events& ev = events();
    std::lock_guard lk(ev.mu);
    if (e == nullptr || ev.live.count(e) == 0) return detail::fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent");
    rec = e->latest;
  }
  push(*st, [rec] { wait_record(rec); });
  return cudaSuccess;
}

extern "C" cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  StreamPtr st;
  if (cudaError_t e = stream_call(s, "cudaLaunchHostFunc", st); e != cudaSuccess) return e;
  if (fn == nullptr) return detail::fail(cudaErrorInvalidValue, "cudaLaunchHostFunc");
  push(*st, [fn, data] {
    detail::tl_in_callback = true;
    fn(data);
    detail::tl_in_callback = false;
  });
  return cudaSuccess;
}

// ---- copies --------------------------------------------------------------------------------

extern "C" cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  StreamPtr st;
  if (cudaError_t e = stream_call(s, "cudaMemcpyAsync", st); e != cudaSuccess) return e;
  if (!copy_ok(dst, src, bytes, kind, "cudaMemcpyAsync")) return detail::fail(cudaErrorInvalidValue, "cudaMemcpyAsync");
  push(*st, [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr); e != cudaSuccess) return e;
  return cudaStreamSynchronize(nullptr);  // synchronous: on the default stream, waited for
}

extern "C" cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  StreamPtr st;
  if (cudaError_t e = stream_call(s, "cudaMemsetAsync", st); e != cudaSuccess) return e;
  if (!device_side_ok(dst, bytes, "cudaMemsetAsync", "dst")) return detail::fail(cudaErrorInvalidValue, "cudaMemsetAsync");
  push(*st, [=] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

extern "C" cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (cudaError_t e = cudaMemsetAsync(dst, value, bytes, nullptr); e != cudaSuccess) return e;
  return cudaStreamSynchronize(nullptr);
}

// ---- events --------------------------------------------------------------------------------

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  if (cudaError_t r = detail::enter("cudaEventCreate"); r != cudaSuccess) return r;
  if (e == nullptr) return detail::fail(cudaErrorInvalidValue, "cudaEventCreate");
  auto* ev = new CUevent_st;
  ev->device = detail::tl_device;
  {
    Events& all = events();
    std::lock_guard lk(all.mu);
    all.live.insert(ev);
  }
  *e = ev;
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

// A record still pending may be destroyed: it completes on its stream all the same.
extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (cudaError_t r = detail::enter("cudaEventDestroy"); r != cudaSuccess) return r;
  {
    Events& all = events();
    std::lock_guard lk(all.mu);
    if (e == nullptr || all.live.erase(e) == 0) {
      std::fprintf(stderr, "fake-cuda: cudaEventDestroy(%p): no such event (destroyed twice?)\n", static_cast<void*>(e));
      return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy");
    }
  }
  delete e;
  return cudaSuccess;
}

// The event and the stream must belong to one device (CUDA: invalid resource handle).
extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  StreamPtr st;
  if (cudaError_t r = stream_call(s, "cudaEventRecord", st); r != cudaSuccess) return r;
  auto rec = std::make_shared<Record>();
  {
    Events& all = events();
    std::lock_guard lk(all.mu);
    if (e == nullptr || all.live.count(e) == 0) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventRecord");
    if (e->device != st->device) {
      std::fprintf(stderr, "fake-cuda: cudaEventRecord: event of cuda:%d on a stream of cuda:%d\n", e->device, st->device);
      return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventRecord");
    }
    e->latest = rec;
  }
  push(*st, [rec] {
    Events& all = events();
    std::lock_guard lk(all.mu);
    rec->done = true;
    all.cv.notify_all();
  });
  return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (cudaError_t r = detail::enter("cudaEventQuery"); r != cudaSuccess) return r;
  Events& all = events();
  std::lock_guard lk(all.mu);
  if (e == nullptr || all.live.count(e) == 0) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventQuery");
  return !e->latest || e->latest->done ? cudaSuccess : cudaErrorNotReady;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (cudaError_t r = detail::enter("cudaEventSynchronize"); r != cudaSuccess) return r;
  std::shared_ptr<Record> rec;
  {
    Events& all = events();
    std::lock_guard lk(all.mu);
    if (e == nullptr || all.live.count(e) == 0) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize");
    rec = e->latest;
  }
  wait_record(rec);
  return cudaSuccess;
}

// ---- hooks ---------------------------------------------------------------------------------

extern "C" cudaError_t rf_fake_cuda_spin(cudaStream_t s) {
  StreamPtr st;
  if (cudaError_t e = stream_call(s, "rf_fake_cuda_spin", st); e != cudaSuccess) return e;
  unsigned long long generation = 0;
  {
    Spins& sp = spins();
    std::lock_guard lk(sp.mu);
    generation = sp.generation;
  }
  push(*st, [generation] {
    Spins& sp = spins();
    std::unique_lock lk(sp.mu);
    ++sp.running;
    sp.cv.wait(lk, [&] { return sp.generation != generation; });
    --sp.running;
  });
  return cudaSuccess;
}

extern "C" void rf_fake_cuda_release_spins(void) {
  Spins& sp = spins();
  std::lock_guard lk(sp.mu);
  ++sp.generation;
  sp.cv.notify_all();
}

extern "C" int rf_fake_cuda_spinning(void) {
  Spins& sp = spins();
  std::lock_guard lk(sp.mu);
  return sp.running;
}

extern "C" cudaError_t rf_fake_cuda_enqueue_host(cudaStream_t s, void (*fn)(void*), void* arg) {
  StreamPtr st;
  if (cudaError_t e = stream_call(s, "rf_fake_cuda_enqueue_host", st); e != cudaSuccess) return e;
  push(*st, [fn, arg] { fn(arg); });
  return cudaSuccess;
}
