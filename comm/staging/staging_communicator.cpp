// The UCX fallback's communicator (comm/staging/staging_communicator.h), with no CUDA: the
// device's part is a DeviceCopies (CUDA's in comm/cuda/device_staging.cpp).
//
// One collective on a device buffer, on the caller's stream S:
//   start:  S waits for the slot's `released` mark (its previous H2D copy), then D2H into
//           the slot, then the `copied_in` mark; the op joins the FIFO. Nothing blocks.
//   stager: takes the FIFO's front, polls `copied_in`, then starts the inner (host)
//           collective on the staging, and moves on to the next.
//   finish: (the Work's test()/wait(), once the inner one is done) H2D on S, the `released`
//           mark on S, the slot goes back to the pool; only then does the Work report
//           finished, so what is enqueued on S afterwards reads the result.
// Results are the inner host collective's, byte for byte (R4): the copies move bits.
//
// Order (comm/communicator.h: all ranks start the same collectives in the same order, and
// the UCX communicator runs them in start order): inner collectives start in the order the
// outer ones were started. While the FIFO holds anything, host collectives, blobs and
// barriers queue behind it; when it is empty they start on the inner communicator at once.
//
// Failures: the stager polls the copy against the abort flag (an aborted op's inner
// collective is started anyway and fails at once with the inner's Aborted, without touching
// the staging) and the stall timeout (TimedOut; the rank then fences itself with
// abort_failed, so its peers fail naming it). A CUDA error fails the op with rf::Error
// naming the device and the call, and fences the rank the same way.
// Staging of a failed or abandoned op may still be written (a D2H copy in flight, UCX's
// receives until the inner communicator closes): its slots go back to the pool only when the
// last holder of the wrapped communicator lets go.
#include "comm/staging/staging_communicator.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "comm/errors.h"

namespace rf::comm::cuda {

namespace {

// One staged piece of a collective: a device range and the slot it goes through.
struct Segment {
  void* device_ptr = nullptr;
  size_t bytes = 0;
  bool copy_in = false;   // D2H before the inner collective
  bool copy_out = false;  // H2D after it
  StagingLease lease;
};

struct Op {
  const char* name = "";
  OpId id;
  Stream stream = nullptr;
  std::vector<Segment> segments;     // empty: a host op, queued only to keep the order
  std::function<WorkPtr()> start_inner;
  enum Phase { kQueued, kStarted, kDone, kFailed } phase = kQueued;  // under Shared::mu
  WorkPtr inner;
  std::exception_ptr error;
  bool leases_out = false;  // the leases went back to the pool, or to Shared::held
};

// What the communicator and its Works share. The wrapped communicator lives as long as the
// last of them; slots of failed ops go back to the pool after it is gone.
struct Shared {
  std::shared_ptr<Communicator> inner;
  std::shared_ptr<DeviceCopies> copies;
  int device = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Op>> fifo;  // started, inner collective not yet started
  std::vector<StagingLease> held;         // slots that may still be written

  ~Shared() {
    inner.reset();  // closes UCX: nothing writes into the held slots any more
    for (const StagingLease& l : held) copies->give(l);
  }
  CommErrorInfo info(const Op& op, std::string cause) const {
    CommErrorInfo i;
    i.rank = inner->rank();
    i.collective = op.name;
    i.generation = static_cast<int64_t>(inner->generation());
    i.step = static_cast<int64_t>(op.id.step);
    i.op = op.id.op;
    i.cause = std::move(cause);
    return i;
  }
  // Under mu: the op failed; its slots stay out of the pool until the inner one closes.
  void fail(Op& op, std::exception_ptr e) {
    op.phase = Op::kFailed;
    op.error = std::move(e);
    if (!op.leases_out)
      for (const Segment& s : op.segments) held.push_back(s.lease);
    op.leases_out = true;
    cv.notify_all();
  }
};

class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<Shared> sh, std::shared_ptr<Op> op) : sh_(std::move(sh)), op_(std::move(op)) {}
  ~StagedWork() override {
    // Abandoned before it finished: its staging may still be in use.
    std::lock_guard<std::mutex> lk(sh_->mu);
    if (!op_->leases_out)
      for (const Segment& s : op_->segments) sh_->held.push_back(s.lease);
    op_->leases_out = true;
  }

  bool test() override {
    {
      std::lock_guard<std::mutex> lk(sh_->mu);
      if (op_->phase == Op::kFailed) std::rethrow_exception(op_->error);
      if (op_->phase == Op::kDone) return true;
      if (op_->phase == Op::kQueued) return false;
    }
    try {
      if (!op_->inner->test()) return false;
    } catch (...) {
      fail_and_rethrow();
    }
    finish();
    return true;
  }

  void wait(TimePoint deadline) override {
    {
      std::unique_lock<std::mutex> lk(sh_->mu);
      while (op_->phase == Op::kQueued) {
        if (Clock::now() >= deadline)
          throw TimedOut(sh_->info(*op_, "the deadline passed while the device copy into staging was pending"));
        // The stager notifies on every start and failure; the bound re-checks the deadline.
        const TimePoint wake = Clock::now() + std::chrono::milliseconds(10);
        sh_->cv.wait_until(lk, deadline < wake ? deadline : wake);
      }
      if (op_->phase == Op::kFailed) std::rethrow_exception(op_->error);
      if (op_->phase == Op::kDone) return;
    }
    try {
      op_->inner->wait(deadline);  // the inner wait loop: abort flag, stall timeout, peers
    } catch (const TimedOut&) {
      if (Clock::now() >= deadline && deadline != TimePoint::max()) throw;  // the caller's deadline: still running
      fail_and_rethrow();
    } catch (...) {
      fail_and_rethrow();
    }
    finish();
  }

 private:
  [[noreturn]] void fail_and_rethrow() {
    std::exception_ptr e = std::current_exception();
    std::lock_guard<std::mutex> lk(sh_->mu);
    sh_->fail(*op_, e);
    std::rethrow_exception(e);
  }
  // The inner collective is done: copy back on the caller's stream, then report finished.
  void finish() {
    std::lock_guard<std::mutex> lk(sh_->mu);
    if (op_->phase == Op::kDone) return;
    try {
      if (!op_->segments.empty()) sh_->copies->make_current();
      for (const Segment& s : op_->segments)
        sh_->copies->copy_out(s.lease, s.device_ptr, s.bytes, s.copy_out && s.bytes > 0, op_->stream);
    } catch (...) {
      sh_->fail(*op_, std::current_exception());
      throw;
    }
    for (const Segment& s : op_->segments) sh_->copies->give(s.lease);
    op_->leases_out = true;
    op_->phase = Op::kDone;
  }

  std::shared_ptr<Shared> sh_;
  std::shared_ptr<Op> op_;
};

// A collective that failed when it was started (nothing queued, nothing staged).
class FailedWork final : public Work {
 public:
  explicit FailedWork(std::exception_ptr e) : e_(std::move(e)) {}
  bool test() override { std::rethrow_exception(e_); }
  void wait(TimePoint) override { std::rethrow_exception(e_); }

 private:
  std::exception_ptr e_;
};

class StagingCommunicator final : public Communicator {
 public:
  StagingCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<DeviceCopies> copies)
      : sh_(std::make_shared<Shared>()) {
    sh_->inner = std::move(inner);
    sh_->device = copies->device();
    sh_->copies = std::move(copies);
    // A staging thread, not the training thread, waits for each D2H copy: a backward hook
    // returns at once and the GPU computes the next buckets while earlier ones are copied
    // and reduced (a wait in the hook would lose that overlap; starting lazily from
    // test()/wait() would start nothing before the reducer's finish()).
    stager_ = std::thread([this] { stager_main(); });
  }
  ~StagingCommunicator() override {
    {
      std::lock_guard<std::mutex> lk(sh_->mu);
      stop_ = true;
    }
    sh_->cv.notify_all();
    stager_.join();
    std::lock_guard<std::mutex> lk(sh_->mu);
    for (auto& op : sh_->fifo)
      sh_->fail(*op, std::make_exception_ptr(Aborted(sh_->info(*op, "the communicator was destroyed"))));
    sh_->fifo.clear();
  }

  int rank() const override { return sh_->inner->rank(); }
  int world_size() const override { return sh_->inner->world_size(); }
  uint64_t generation() const override { return sh_->inner->generation(); }

  WorkPtr allreduce_start(Buffer buf, OpId id, Stream stream) override {
    if (buf.device == Device::host)
      return start_host("all-reduce", id, [=, this] { return sh_->inner->allreduce_start(buf, id, stream); });
    check_device_buffer(buf, "all-reduce");
    Buffer h = host_view(buf);
    return start_device("all-reduce", id, stream, {{buf.data, buf.bytes(), true, true, {}}},
                        [this, h, id](const std::vector<Segment>& s) mutable {
                          h.data = s[0].lease.host;
                          h.registered = s[0].lease.registered;
                          return sh_->inner->allreduce_start(h, id);
                        });
  }
  WorkPtr broadcast_start(Buffer buf, int root, OpId id, Stream stream) override {
    if (buf.device == Device::host)
      return start_host("broadcast", id, [=, this] { return sh_->inner->broadcast_start(buf, root, id, stream); });
    check_device_buffer(buf, "broadcast");
    const bool is_root = root == rank();
    Buffer h = host_view(buf);
    return start_device("broadcast", id, stream, {{buf.data, buf.bytes(), is_root, !is_root, {}}},
                        [this, h, root, id](const std::vector<Segment>& s) mutable {
                          h.data = s[0].lease.host;
                          h.registered = s[0].lease.registered;
                          return sh_->inner->broadcast_start(h, root, id);
                        });
  }
  WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream stream) override {
    if (in.device == Device::host && out.device == Device::host)
      return start_host("all-gather", id, [=, this] { return sh_->inner->allgather_start(in, out, id, stream); });
    if (in.device != out.device)
      throw rf::InvalidInput("all-gather: input and output must both be host or both be device buffers");
    check_device_buffer(in, "all-gather");
    check_device_buffer(out, "all-gather");
    Buffer hi = host_view(in), ho = host_view(out);
    return start_device("all-gather", id, stream,
                        {{in.data, in.bytes(), true, false, {}}, {out.data, out.bytes(), false, true, {}}},
                        [this, hi, ho, id](const std::vector<Segment>& s) mutable {
                          hi.data = s[0].lease.host;
                          hi.registered = s[0].lease.registered;
                          ho.data = s[1].lease.host;
                          ho.registered = s[1].lease.registered;
                          return sh_->inner->allgather_start(hi, ho, id);
                        });
  }
  WorkPtr barrier_start(OpId id) override {
    return start_host("barrier", id, [=, this] { return sh_->inner->barrier_start(id); });
  }
  WorkPtr send_start(int peer, const void* data, size_t bytes, OpId id) override {
    return start_host("send", id, [=, this] { return sh_->inner->send_start(peer, data, bytes, id); });
  }
  WorkPtr recv_start(int peer, void* data, size_t bytes, OpId id) override {
    return start_host("recv", id, [=, this] { return sh_->inner->recv_start(peer, data, bytes, id); });
  }

  void abort(const std::string& reason) override {
    sh_->inner->abort(reason);
    sh_->cv.notify_all();
  }
  void abort_failed(const std::string& reason) override {
    sh_->inner->abort_failed(reason);
    sh_->cv.notify_all();
  }
  bool aborted() const override { return sh_->inner->aborted(); }
  void inject_drop() override { sh_->inner->inject_drop(); }
  void set_stall_timeout(Duration timeout) override { sh_->inner->set_stall_timeout(timeout); }
  Duration stall_timeout() const override { return sh_->inner->stall_timeout(); }

 private:
  void check_device_buffer(const Buffer& b, const char* what) const {
    if (b.device_index != sh_->device)
      throw rf::InvalidInput(rf::str(what, ": buffer on cuda:", b.device_index, ", but this communicator stages cuda:",
                                     sh_->device));
    if (b.count > 0 && b.data == nullptr)
      throw rf::InvalidInput(rf::str(what, ": null buffer of ", b.count, " elements"));
    if (const RegisteredMemory* m = b.registered) {
      if (m->device() != Device::cuda || m->device_index() != b.device_index || !m->contains(b.data, b.bytes()))
        throw rf::InvalidInput(rf::str(what, ": buffer [", b.data, ", +", b.bytes(),
                                       " bytes) is not inside the registered memory it names on its device"));
    }
  }
  static Buffer host_view(const Buffer& b) {
    Buffer h{nullptr, b.count, b.dtype};
    return h;
  }

  // Straight to the inner communicator, behind whatever the FIFO holds (start order).
  WorkPtr start_host(const char* name, OpId id, std::function<WorkPtr()> start) {
    std::unique_lock<std::mutex> lk(sh_->mu);
    if (sh_->fifo.empty()) return start();  // under mu: the stager cannot start one in between
    auto op = std::make_shared<Op>();
    op->name = name;
    op->id = id;
    op->start_inner = std::move(start);
    sh_->fifo.push_back(op);
    lk.unlock();
    sh_->cv.notify_all();
    return std::make_shared<StagedWork>(sh_, op);
  }

  WorkPtr start_device(const char* name, OpId id, Stream stream, std::vector<Segment> segments,
                       std::function<WorkPtr(const std::vector<Segment>&)> start) {
    auto op = std::make_shared<Op>();
    op->name = name;
    op->id = id;
    op->stream = stream;
    op->segments = std::move(segments);
    // Aborted: fail at once (the contract's 10 ms), without taking staging or copying.
    if (sh_->inner->aborted())
      return std::make_shared<FailedWork>(
          std::make_exception_ptr(Aborted(sh_->info(*op, "the communicator was aborted before it started"))));
    const int dev = sh_->device;
    size_t leased = 0;
    try {
      sh_->copies->make_current();
      for (Segment& s : op->segments) {
        s.lease = sh_->copies->take(StagingKey{dev, reinterpret_cast<uintptr_t>(s.device_ptr), s.bytes});
        ++leased;
        // Even without a copy in (a broadcast's receivers, an all-gather's output) the mark
        // is needed: the host writes the staging only after the slot's previous copy out.
        sh_->copies->copy_in(s.lease, s.device_ptr, s.bytes, s.copy_in && s.bytes > 0, op->stream);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(sh_->mu);
      for (size_t i = 0; i < leased; ++i) sh_->held.push_back(op->segments[i].lease);
      throw;
    }
    op->start_inner = [op_raw = op.get(), start = std::move(start)] { return start(op_raw->segments); };
    {
      std::lock_guard<std::mutex> lk(sh_->mu);
      sh_->fifo.push_back(op);
    }
    sh_->cv.notify_all();
    return std::make_shared<StagedWork>(sh_, op);
  }

  enum class CopyIn { done, aborted, stopped, stalled };
  // Waits for every copy into the op's staging (and, through the stream's wait on
  // `released`, for the slot's previous copy out: the host may write the staging then).
  CopyIn wait_copied_in(const Op& op) {
    const TimePoint since = Clock::now();
    for (unsigned round = 0;; ++round) {
      bool all = true;
      for (const Segment& s : op.segments) {
        if (!sh_->copies->copied_in(s.lease)) {
          all = false;
          break;
        }
      }
      if (all) return CopyIn::done;
      if (sh_->inner->aborted()) return CopyIn::aborted;
      if (stop_flag()) return CopyIn::stopped;
      if (Clock::now() - since > sh_->inner->stall_timeout()) return CopyIn::stalled;
      // Back-off: the copy follows the bucket's last kernels, usually within microseconds;
      // naps stay short so an abort is seen well within its 10 ms.
      if (round < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(round < 1024 ? 20 : 200));
    }
  }
  bool stop_flag() {
    std::lock_guard<std::mutex> lk(sh_->mu);
    return stop_;
  }

  void stager_main() {
    bool current = false;
    std::unique_lock<std::mutex> lk(sh_->mu);
    for (;;) {
      sh_->cv.wait(lk, [&] { return stop_ || !sh_->fifo.empty(); });
      if (stop_) return;
      std::shared_ptr<Op> op = sh_->fifo.front();
      lk.unlock();
      std::exception_ptr error;
      WorkPtr inner;
      try {
        if (!op->segments.empty() && !current) {
          sh_->copies->make_current();
          current = true;
        }
        const CopyIn copy = op->segments.empty() ? CopyIn::done : wait_copied_in(*op);
        if (copy == CopyIn::stopped) {
          error = std::make_exception_ptr(Aborted(sh_->info(*op, "the communicator was destroyed")));
        } else if (copy == CopyIn::stalled) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(sh_->inner->stall_timeout());
          const std::string cause = rf::str("cuda:", sh_->device, ": the device copy into staging made no progress for ",
                                            ms.count(), " ms (stall timeout)");
          error = std::make_exception_ptr(TimedOut(sh_->info(*op, cause)));
          sh_->inner->abort_failed(cause);
        } else {
          // Done, or aborted: then the inner start fails at once, naming the abort's reason,
          // and touches no staging.
          inner = op->start_inner();
        }
      } catch (const CommError&) {
        error = std::current_exception();
      } catch (const rf::InvalidInput&) {
        error = std::current_exception();  // a caller's bad arguments: no reason to fence the rank
      } catch (const std::exception& e) {
        error = std::current_exception();
        sh_->inner->abort_failed(e.what());  // a CUDA error: this rank cannot go on
      }
      lk.lock();
      sh_->fifo.pop_front();
      if (error) {
        sh_->fail(*op, error);
      } else {
        op->inner = std::move(inner);
        op->phase = Op::kStarted;
      }
      sh_->cv.notify_all();
    }
  }

  std::shared_ptr<Shared> sh_;
  bool stop_ = false;  // under sh_->mu
  std::thread stager_;
};
}  // namespace

std::shared_ptr<Communicator> make_staging_communicator(std::shared_ptr<Communicator> inner,
                                                        std::shared_ptr<DeviceCopies> copies) {
  if (!inner) throw rf::InvalidInput("staging communicator: no host communicator to wrap");
  if (!copies) throw rf::InvalidInput("staging communicator: no device copies");
  return std::make_shared<StagingCommunicator>(std::move(inner), std::move(copies));
}

}  // namespace rf::comm::cuda
