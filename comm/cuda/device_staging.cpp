// The UCX fallback for device buffers (comm/cuda/device_staging.h): a collective on device
// memory is a copy into pinned host staging on the caller's stream, the host collective on
// the staging once that copy is done, and a copy back on the same stream.
//
// Where the copy-in is waited for: in the Work (test/wait), never in *_start. The reducer
// starts buckets from autograd hooks while backward is still being enqueued; blocking there
// until the GPU reached the bucket would stall the host's launches behind the device. The
// host collectives must still start in the order the buckets were enqueued, on every rank
// alike: StagingQueue (comm/cuda/staging_queue.h) holds that order.
//
// The staging of a buffer is a SharedBuffer (memfd) page-locked with cudaHostRegister, made
// at the buffer's first collective and kept for the communicator's life (one per bucket:
// nothing is allocated after the first step). Being a SharedBuffer, it is registered memory
// for the UCX backend: ranks of one host (several processes sharing a GPU) all-reduce it
// zero-copy (docs/comm.md, "Shared-memory path").
#include "comm/cuda/device_staging.h"

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "base/error.h"
#include "base/str.h"
#include "comm/cuda/staging_queue.h"
#include "comm/errors.h"
#include "comm/shared_buffer.h"

namespace rf::comm::cuda {

namespace {

std::string cuda_text(cudaError_t e) { return rf::str(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"); }

struct Staging {
  explicit Staging(size_t bytes) : host(bytes) {
    // Pinned: the copies run at the bus's speed and asynchronously. A mapping CUDA cannot
    // pin still works: copies from pageable memory complete before cudaMemcpyAsync returns.
    pinned = bytes > 0 && cudaHostRegister(host.data(), bytes, cudaHostRegisterDefault) == cudaSuccess;
    if (!pinned) (void)cudaGetLastError();
    if (cudaEventCreateWithFlags(&copied, cudaEventDisableTiming) != cudaSuccess)
      throw rf::Error("device staging: cudaEventCreateWithFlags failed");
  }
  ~Staging() {
    if (pinned) (void)cudaHostUnregister(host.data());
    if (copied) (void)cudaEventDestroy(copied);
  }
  SharedBuffer host;
  bool pinned = false;
  cudaEvent_t copied = nullptr;
};

enum class Kind { allreduce, broadcast, allgather };

// One staged collective.
struct Op {
  uint64_t id = 0;
  Kind kind = Kind::allreduce;
  Buffer dev_in, dev_out;  // in place (dev_out == dev_in) but for the all-gather
  int root = 0;
  OpId opid;
  cudaStream_t stream = nullptr;
  Staging* in = nullptr;
  Staging* out = nullptr;
  TimePoint enqueued{};
  WorkPtr inner;  // the host collective, once started
  bool done = false;
  std::exception_ptr error;
};

class StagedCommunicator;

class StagedWork final : public Work {
 public:
  StagedWork(StagedCommunicator* owner, std::shared_ptr<Op> op) : owner_(owner), op_(std::move(op)) {}
  ~StagedWork() override;
  bool test() override;
  void wait(TimePoint deadline) override;

 private:
  StagedCommunicator* owner_;
  std::shared_ptr<Op> op_;
};

class StagedCommunicator final : public Communicator {
 public:
  StagedCommunicator(std::shared_ptr<Communicator> inner, int device_index)
      : inner_(std::move(inner)), device_(device_index) {}
  ~StagedCommunicator() override {
    // A copy back may still read a staging on its stream: let every stream used finish
    // before the staging is unpinned and unmapped (never on the step path).
    for (cudaStream_t s : streams_) (void)cudaStreamSynchronize(s);
  }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  uint64_t generation() const override { return inner_->generation(); }

  WorkPtr allreduce_start(Buffer buf, OpId id, Stream stream) override {
    if (buf.device == Device::host) return host_op([&] { return inner_->allreduce_start(buf, id, stream); });
    return stage(Kind::allreduce, buf, buf, 0, id, stream, "all-reduce");
  }
  WorkPtr broadcast_start(Buffer buf, int root, OpId id, Stream stream) override {
    if (buf.device == Device::host) return host_op([&] { return inner_->broadcast_start(buf, root, id, stream); });
    return stage(Kind::broadcast, buf, buf, root, id, stream, "broadcast");
  }
  WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream stream) override {
    if (in.device == Device::host && out.device == Device::host)
      return host_op([&] { return inner_->allgather_start(in, out, id, stream); });
    if (in.device != out.device)
      throw rf::InvalidInput("all-gather: the input and output buffers must be on the same device");
    return stage(Kind::allgather, in, out, 0, id, stream, "all-gather");
  }
  WorkPtr barrier_start(OpId id) override { return host_op([&] { return inner_->barrier_start(id); }); }
  WorkPtr send_start(int peer, const void* data, size_t bytes, OpId id) override {
    return host_op([&] { return inner_->send_start(peer, data, bytes, id); });
  }
  WorkPtr recv_start(int peer, void* data, size_t bytes, OpId id) override {
    return host_op([&] { return inner_->recv_start(peer, data, bytes, id); });
  }

  void abort(const std::string& reason) override { inner_->abort(reason); }
  void abort_failed(const std::string& reason) override { inner_->abort_failed(reason); }
  bool aborted() const override { return inner_->aborted(); }
  void inject_drop() override { inner_->inject_drop(); }
  void set_stall_timeout(Duration timeout) override { inner_->set_stall_timeout(timeout); }
  Duration stall_timeout() const override { return inner_->stall_timeout(); }

  // One step of op's progress; true once it finished (its result enqueued on its stream).
  // Throws its error.
  bool advance(Op& op) {
    std::unique_lock<std::mutex> lk(mu_);
    if (op.error) std::rethrow_exception(op.error);
    if (op.done) return true;
    if (!op.inner) {
      start_copied(Clock::now());
      if (op.error) std::rethrow_exception(op.error);
      if (!op.inner) return false;
    }
    WorkPtr inner = op.inner;
    lk.unlock();
    bool finished = false;
    try {
      finished = inner->test();
    } catch (...) {
      lk.lock();
      op.error = std::current_exception();
      throw;
    }
    if (!finished) return false;
    lk.lock();
    copy_back(op);
    return true;
  }

  // Blocks until op finished or `deadline`; throws its error, or TimedOut at the deadline.
  void wait_for(Op& op, TimePoint deadline) {
    while (!advance(op)) {
      std::unique_lock<std::mutex> lk(mu_);
      WorkPtr inner = op.inner;
      lk.unlock();
      if (inner) {
        // The host collective has its own wait (deadline, stall, abort); then copy back.
        try {
          inner->wait(deadline);
        } catch (...) {
          lk.lock();
          if (!(op.inner && is_caller_timeout(deadline))) op.error = std::current_exception();
          throw;
        }
        continue;
      }
      if (Clock::now() >= deadline) {
        CommErrorInfo i = info(op, "the caller's deadline passed while the buffer was copied to the host");
        throw TimedOut(i);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));  // the copy-in: a poll interval
    }
  }

  void forget(const std::shared_ptr<Op>& op) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!op->inner && !op->error) queue_.drop(op->id);
    ops_.erase(op->id);
  }

 private:
  static bool is_caller_timeout(TimePoint deadline) { return Clock::now() >= deadline; }

  CommErrorInfo info(const Op& op, const std::string& cause) const {
    CommErrorInfo i;
    i.rank = inner_->rank();
    i.collective = op.kind == Kind::allreduce ? "all-reduce" : op.kind == Kind::broadcast ? "broadcast" : "all-gather";
    i.generation = static_cast<int64_t>(inner_->generation());
    i.step = static_cast<int64_t>(op.opid.step);
    i.op = op.opid.op;
    i.peer = inner_->rank();
    i.cause = cause;
    return i;
  }

  // A failing device is this rank's failure: the peers are told so (they fail naming this
  // rank) and the collective fails with PeerFailed naming it.
  void fail_device(Op& op, const char* call, cudaError_t e) {
    const std::string cause = rf::str("cuda:", device_, ": ", call, ": ", cuda_text(e));
    inner_->abort_failed(cause);
    op.error = std::make_exception_ptr(PeerFailed(info(op, cause)));
  }

  void use_device() {
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess || now != device_) (void)cudaSetDevice(device_);
  }

  // The staging of a device buffer as the host collective's buffer: registered, so that
  // ranks of one host all-reduce it zero-copy.
  static Buffer host_view(const Buffer& dev, Staging& s) {
    Buffer b;
    b.data = s.host.data();
    b.count = dev.count;
    b.dtype = dev.dtype;
    b.registered = s.host.shared() ? &s.host : nullptr;
    return b;
  }

  Staging* staging_for(const Buffer& b, int role) {
    auto& s = staging_[{b.data, b.bytes(), role}];
    if (!s) s = std::make_unique<Staging>(b.bytes());
    return s.get();
  }

  WorkPtr stage(Kind kind, const Buffer& in, const Buffer& out, int root, OpId id, Stream stream, const char* what) {
    if (in.device_index != device_ || out.device_index != device_)
      throw rf::InvalidInput(rf::str(what, ": a buffer on cuda:", in.device_index, " given to the communicator of cuda:",
                                     device_));
    if ((in.count > 0 && in.data == nullptr) || (out.count > 0 && out.data == nullptr))
      throw rf::InvalidInput(rf::str(what, ": null device buffer"));
    auto op = std::make_shared<Op>();
    std::lock_guard<std::mutex> lk(mu_);
    use_device();
    op->kind = kind;
    op->dev_in = in;
    op->dev_out = out;
    op->root = root;
    op->opid = id;
    op->stream = static_cast<cudaStream_t>(stream);
    op->in = staging_for(in, 0);
    op->out = kind == Kind::allgather ? staging_for(out, 1) : op->in;
    op->enqueued = Clock::now();
    op->id = queue_.enqueue();
    streams_.insert(op->stream);
    ops_[op->id] = op;
    if (const cudaError_t e = cudaMemcpyAsync(op->in->host.data(), in.data, in.bytes(), cudaMemcpyDeviceToHost,
                                              op->stream);
        e != cudaSuccess) {
      fail_device(*op, "cudaMemcpyAsync to the host", e);
    } else if (const cudaError_t r = cudaEventRecord(op->in->copied, op->stream); r != cudaSuccess) {
      fail_device(*op, "cudaEventRecord", r);
    }
    return std::make_shared<StagedWork>(this, op);
  }

  // Under mu_: notes the copies that are done, starts on the host every collective whose
  // turn it is (StagingQueue), and fails the oldest waiting one past the stall timeout.
  void start_copied(TimePoint now) {
    for (auto& [id, op] : ops_) {
      if (op->inner || op->error) continue;
      const cudaError_t q = cudaEventQuery(op->in->copied);
      if (q == cudaSuccess) {
        queue_.copied(id);
      } else if (q != cudaErrorNotReady) {
        fail_device(*op, "cudaEventQuery", q);
        queue_.drop(id);
      }
    }
    uint64_t id = 0;
    while (queue_.next_startable(&id)) {
      Op& op = *ops_.at(id);
      const Buffer in = host_view(op.dev_in, *op.in), out = host_view(op.dev_out, *op.out);
      try {
        if (op.kind == Kind::allreduce) op.inner = inner_->allreduce_start(in, op.opid);
        else if (op.kind == Kind::broadcast) op.inner = inner_->broadcast_start(in, op.root, op.opid);
        else op.inner = inner_->allgather_start(in, out, op.opid);
      } catch (const CommError&) {
        op.error = std::current_exception();
      }
    }
    // D3 for the copy-in: a device that never reaches the buffer (a kernel stuck before it)
    // is a stall like any other.
    const Duration stall = inner_->stall_timeout();
    for (auto& [oid, op] : ops_) {
      if (op->inner || op->error || now - op->enqueued <= stall) continue;
      const std::string cause = rf::str("cuda:", device_, " did not finish the work before the buffer within the stall ",
                                        "timeout (", std::chrono::duration_cast<std::chrono::milliseconds>(stall).count(),
                                        " ms)");
      inner_->abort_failed(cause);
      op->error = std::make_exception_ptr(TimedOut(info(*op, cause)));
      queue_.drop(oid);
    }
  }

  void copy_back(Op& op) {
    if (op.done) return;
    use_device();
    const bool root_keeps = op.kind == Kind::broadcast && op.root == inner_->rank();  // its buffer is the source
    if (!root_keeps) {
      if (const cudaError_t e = cudaMemcpyAsync(op.dev_out.data, op.out->host.data(), op.dev_out.bytes(),
                                                cudaMemcpyHostToDevice, op.stream);
          e != cudaSuccess) {
        fail_device(op, "cudaMemcpyAsync to the device", e);
        std::rethrow_exception(op.error);
      }
    }
    op.done = true;
  }

  // Host buffers, blobs and barriers go straight to the host communicator, after every
  // staged collective before them has started there (the order every rank starts them in).
  template <typename F>
  WorkPtr host_op(F&& start) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        start_copied(Clock::now());
        if (queue_.empty()) return start();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));  // a poll interval
    }
  }

  std::shared_ptr<Communicator> inner_;
  int device_;
  std::mutex mu_;
  StagingQueue queue_;
  std::map<uint64_t, std::shared_ptr<Op>> ops_;  // staged and not yet forgotten, by id
  std::map<std::tuple<const void*, size_t, int>, std::unique_ptr<Staging>> staging_;
  std::set<cudaStream_t> streams_;
};

StagedWork::~StagedWork() { owner_->forget(op_); }
bool StagedWork::test() { return owner_->advance(*op_); }
void StagedWork::wait(TimePoint deadline) { owner_->wait_for(*op_, deadline); }

}  // namespace

std::shared_ptr<Communicator> stage_device_buffers(std::shared_ptr<Communicator> host, const CommOptions& o) {
  if (!host) throw rf::InvalidInput("stage_device_buffers: no host communicator");
  if (o.device != Device::cuda)
    throw rf::InvalidInput("stage_device_buffers: the options name no GPU (CommOptions::device = host)");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || o.device_index < 0 || o.device_index >= count) {
    (void)cudaGetLastError();
    throw rf::InvalidInput(rf::str("stage_device_buffers: cuda:", o.device_index, ": no such GPU (", count, " found)"));
  }
  return std::make_shared<StagedCommunicator>(std::move(host), o.device_index);
}

}  // namespace rf::comm::cuda
