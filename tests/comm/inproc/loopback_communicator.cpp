// LoopbackCommunicator: its calls and the threads that drive it (loopback_communicator.h);
// what one pass of the driver does is in loopback_pump.cpp.
#include "tests/comm/inproc/loopback_communicator.h"

#include <algorithm>
#include <thread>

#include "base/clock.h"
#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/algorithms.h"
#include "comm/tag.h"
#include "tests/comm/inproc/loopback_pending.h"

namespace rf::comm::inproc {

LoopbackCommunicator::LoopbackCommunicator(std::shared_ptr<LoopbackGeneration> generation, const CommOptions& o,
                                           const LoopbackOptions& loopback)
    : gen_(std::move(generation)),
      rank_(o.rank),
      world_(o.world),
      opt_(loopback),
      on_chunk_(o.on_chunk),
      transport_(gen_->fabric().endpoint(o.rank)) {
  RF_ENFORCE(opt_.flows >= 1 && opt_.flows <= Collective::kMaxFlows && opt_.chunk_bytes >= 64, "loopback options");
  set_stall_timeout(o.stall_timeout);
  small_staging_.assign(std::max<size_t>(opt_.small_allreduce_bytes, 8), 0);
  ring_staging_.assign(static_cast<size_t>(opt_.flows) * opt_.chunk_bytes, 0);
}

LoopbackCommunicator::~LoopbackCommunicator() {
  std::lock_guard dl(driver_mu_);
  if (poisoned_) return;
  bool pending;
  {
    std::lock_guard lk(queue_mu_);
    pending = !queue_.empty();
  }
  if (abort_flag_.load(std::memory_order_acquire)) {
    poison_aborted();
  } else if (pending) {
    // Peers may wait on these: for them this rank failed.
    CommErrorInfo i;
    i.cause = "communicator destroyed";
    poison(Poison::abort, i);
  }
}

// ---- the calls ----

void LoopbackCommunicator::validate(const Buffer& b, OpId id, Stream stream, const char* what) const {
  if (b.device != Device::host) {
    throw rf::InvalidInput(rf::str(what, ": the loopback communicator takes host buffers, got one on cuda:",
                                   b.device_index));
  }
  if (stream != nullptr) throw rf::InvalidInput(rf::str(what, ": the loopback communicator takes no stream"));
  if (b.count > 0 && b.data == nullptr) throw rf::InvalidInput(rf::str(what, ": null buffer of ", b.count, " elements"));
  if (id.step > StepTag::kMaxStep || id.op > StepTag::kMaxUserOp) {
    throw rf::InvalidInput(rf::str(what, ": step ", id.step, " op ", id.op, " do not fit the tag (max ",
                                   StepTag::kMaxStep, ", ", StepTag::kMaxUserOp, ")"));
  }
}

WorkPtr LoopbackCommunicator::allreduce_start(Buffer buf, OpId id, Stream s) {
  validate(buf, id, s, "all-reduce");
  // Every rank has the same size and options, so every rank picks alike (R4).
  if (buf.bytes() <= opt_.small_allreduce_bytes) {
    return start(make_allreduce_recursive_doubling(buf, id, rank_, world_, small_staging_.data()));
  }
  return start(make_allreduce_ring(buf, id, rank_, world_, ring_staging_.data(), opt_.flows, opt_.chunk_bytes));
}

WorkPtr LoopbackCommunicator::broadcast_start(Buffer buf, int root, OpId id, Stream s) {
  validate(buf, id, s, "broadcast");
  if (root < 0 || root >= world_) throw rf::InvalidInput(rf::str("broadcast: root ", root, " of world size ", world_));
  return start(make_broadcast_chain(buf, root, id, rank_, world_, opt_.chunk_bytes));
}

WorkPtr LoopbackCommunicator::allgather_start(Buffer in, Buffer out, OpId id, Stream s) {
  validate(in, id, s, "all-gather");
  validate(out, id, s, "all-gather");
  if (out.dtype != in.dtype || out.count != in.count * static_cast<size_t>(world_)) {
    throw rf::InvalidInput(rf::str("all-gather: output must hold ", world_, " x ", in.count, " ", dtype_name(in.dtype),
                                   ", got ", out.count, " ", dtype_name(out.dtype)));
  }
  return start(make_allgather_ring(in, out, id, rank_, world_));
}

WorkPtr LoopbackCommunicator::barrier_start(OpId id) {
  validate(Buffer{}, id, nullptr, "barrier");
  return start(make_barrier(id, rank_, world_));
}

WorkPtr LoopbackCommunicator::send_start(int peer, const void* data, size_t bytes, OpId id) {
  validate(Buffer{const_cast<void*>(data), bytes, DType::u64}, id, nullptr, "send");
  if (peer < 0 || peer >= world_) throw rf::InvalidInput(rf::str("send: peer ", peer, " of world size ", world_));
  return start(make_send(peer, data, bytes, id, rank_));
}

WorkPtr LoopbackCommunicator::recv_start(int peer, void* data, size_t bytes, OpId id) {
  validate(Buffer{data, bytes, DType::u64}, id, nullptr, "recv");
  if (peer < 0 || peer >= world_) throw rf::InvalidInput(rf::str("recv: peer ", peer, " of world size ", world_));
  return start(make_recv(peer, data, bytes, id));
}

void LoopbackCommunicator::inject_drop() {
  drop_flag_.store(true, std::memory_order_release);
  gen_->fabric().kill(rank_);  // the peers see it at once (D1); this rank at its next pass
}

void LoopbackCommunicator::set_stall_timeout(Duration timeout) {
  stall_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(), std::memory_order_relaxed);
}

Duration LoopbackCommunicator::stall_timeout() const {
  return std::chrono::duration_cast<Duration>(std::chrono::nanoseconds(stall_ns_.load(std::memory_order_relaxed)));
}

void LoopbackCommunicator::abort_with(const std::string& reason, bool blame_self) {
  {
    std::lock_guard ak(abort_mu_);
    if (abort_flag_.load(std::memory_order_relaxed)) return;  // the first reason wins
    abort_reason_ = reason;
    abort_blames_self_ = blame_self;
  }
  abort_flag_.store(true, std::memory_order_release);
  try_drive();  // fails everything now unless a driver holds the lock: it sees the flag within one pass
}

// ---- the queue and its drivers ----

WorkPtr LoopbackCommunicator::start(std::unique_ptr<Collective> c) {
  auto p = std::make_shared<Pending>(this, std::move(c));
  {
    std::lock_guard lk(queue_mu_);
    if (failed_ || abort_flag_.load(std::memory_order_acquire)) {  // fails at once, naming this call
      CommErrorInfo i = failed_ ? poison_info_ : CommErrorInfo{};
      const Poison kind = failed_ ? poison_kind_ : Poison::abort;
      if (!failed_) {
        std::lock_guard ak(abort_mu_);
        i.cause = abort_reason_;
      }
      i.rank = rank_;
      i.generation = static_cast<int64_t>(generation());
      i.collective = p->coll->name();
      i.step = static_cast<int64_t>(p->coll->id().step);
      i.op = p->coll->id().op;
      i.chunk = -1;
      p->error = error_of(kind, i);
      p->state.store(Pending::kFailed, std::memory_order_release);
      return p;
    }
    queue_.push_back(p);
  }
  try_drive();  // moves the older operations along too: a rank moves only when called
  return p;
}

bool LoopbackCommunicator::try_drive(bool* moved) {
  const std::thread::id me = std::this_thread::get_id();
  if (driver_id_.load(std::memory_order_relaxed) == me) return false;  // from the chunk hook
  std::unique_lock dl(driver_mu_, std::try_to_lock);
  if (!dl.owns_lock()) return false;
  driver_id_.store(me, std::memory_order_relaxed);
  const bool m = pump();
  driver_id_.store(std::thread::id{}, std::memory_order_relaxed);
  if (moved) *moved = m;
  return true;
}

// The wait loop: drive when nobody else does, and let go of the lock between passes so
// that another waiter and abort() get it. Naps stay far below abort's 10 ms.
void LoopbackCommunicator::wait_for(Pending& p, TimePoint deadline) {
  RF_ENFORCE(driver_id_.load(std::memory_order_relaxed) != std::this_thread::get_id(),
             "a wait from inside the chunk hook can never end");
  unsigned idle = 0;
  while (p.state.load(std::memory_order_acquire) == Pending::kRunning) {
    bool moved = false;
    try_drive(&moved);
    if (p.state.load(std::memory_order_acquire) != Pending::kRunning) return;
    if (deadline != TimePoint::max() && Clock::now() >= deadline) return;
    idle = moved ? 0 : idle + 1;
    if (idle < 256) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace rf::comm::inproc
