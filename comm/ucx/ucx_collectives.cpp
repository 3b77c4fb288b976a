// UcxCommunicator's collective calls: argument checks, the algorithm for each call, and
// the two ways to run it (started, for the progress thread; blocking, driven by the
// caller). The machinery they hand the collectives to is in ucx_communicator.cpp.
#include "base/error.h"
#include "base/str.h"
#include "comm/algorithms.h"
#include "comm/shm/shared_buffer.h"
#include "comm/shm/shm_session.h"
#include "comm/tag.h"
#include "comm/ucx/ucx_communicator.h"

namespace rf::comm {

void UcxCommunicator::validate(const Buffer& b, OpId id, Stream stream, const char* what) const {
  if (b.device != Device::host) {
    throw rf::InvalidInput(rf::str(what, ": the UCX backend takes host buffers (use the NCCL backend for device memory)"));
  }
  if (stream != nullptr) throw rf::InvalidInput(rf::str(what, ": the UCX backend takes no stream"));
  if (b.count > 0 && b.data == nullptr) throw rf::InvalidInput(rf::str(what, ": null buffer of ", b.count, " elements"));
  if (id.step > StepTag::kMaxStep) {
    throw rf::InvalidInput(rf::str(what, ": step ", id.step, " does not fit the tag (max ", StepTag::kMaxStep, ")"));
  }
  if (id.op > StepTag::kMaxUserOp) {
    throw rf::InvalidInput(rf::str(what, ": op ", id.op, " does not fit the tag (max ", StepTag::kMaxUserOp, ")"));
  }
  if (const RegisteredMemory* m = b.registered) {
    if (m->device() != b.device) {
      throw rf::InvalidInput(rf::str(what, ": a host buffer names registered memory on cuda:", m->device_index()));
    }
    if (!m->contains(b.data, b.bytes())) {
      throw rf::InvalidInput(rf::str(what, ": buffer [", b.data, ", +", b.bytes(), " bytes) is not inside the registered memory it names [",
                                     m->data(), ", +", m->bytes(), " bytes)"));
    }
  }
}

std::unique_ptr<Collective> UcxCommunicator::allreduce_op(Buffer buf, OpId id, Stream stream) {
  validate(buf, id, stream, "all-reduce");
  // Every rank has the same size and the same shm_ (agreed when connecting): all pick alike.
  if (shm_ && buf.bytes() <= shm_->slot_bytes()) return make_allreduce_shm_slots(buf, id, rank_, world_, *shm_);
  std::unique_ptr<Collective> c;
  if (buf.bytes() <= static_cast<size_t>(opt_.small_allreduce_bytes)) {
    c = make_allreduce_recursive_doubling(buf, id, rank_, world_, small_staging_.data());
  } else {
    c = make_allreduce_ring(buf, id, rank_, world_, ring_staging_.data(), opt_.flows, opt_.chunk_bytes);
  }
  // An empty all-reduce moves nothing, so its algorithm may finish on one rank before
  // another entered: it must not take part in the zero-copy sequence (allreduce_zero_copy.cpp
  // relies on every rank having read every `entered` word before anyone can finish).
  if (!shm_ || buf.bytes() == 0) return c;
  // Registered on this rank or not, the zero-copy collective decides with the others which
  // way to go (all zero-copy, or all `c`). Only a SharedBuffer that peers can map counts
  // (validate() checked that the range lies inside what the buffer names).
  SharedRange range;
  const auto* shared = dynamic_cast<const SharedBuffer*>(buf.registered);
  const bool registered = shared != nullptr && shared->range_of(buf.data, buf.bytes(), &range);
  return make_allreduce_zero_copy(buf, id, rank_, world_, *shm_, registered ? &range : nullptr, std::move(c),
                                  zero_copy_scratch_.data(), zero_copy_scratch_.size());
}

std::unique_ptr<Collective> UcxCommunicator::broadcast_op(Buffer buf, int root, OpId id, Stream stream) {
  validate(buf, id, stream, "broadcast");
  if (root < 0 || root >= world_) throw rf::InvalidInput(rf::str("broadcast: root ", root, " of world size ", world_));
  return make_broadcast_chain(buf, root, id, rank_, world_, opt_.chunk_bytes);
}

std::unique_ptr<Collective> UcxCommunicator::allgather_op(Buffer in, Buffer out, OpId id, Stream stream) {
  validate(in, id, stream, "all-gather");
  validate(out, id, stream, "all-gather");
  if (out.dtype != in.dtype || out.count != in.count * static_cast<size_t>(world_)) {
    throw rf::InvalidInput(rf::str("all-gather: output must hold ", world_, " x ", in.count, " ", dtype_name(in.dtype),
                                   ", got ", out.count, " ", dtype_name(out.dtype)));
  }
  return make_allgather_ring(in, out, id, rank_, world_);
}

std::unique_ptr<Collective> UcxCommunicator::barrier_op(OpId id) {
  validate(Buffer{}, id, nullptr, "barrier");
  return make_barrier(id, rank_, world_);
}

std::unique_ptr<Collective> UcxCommunicator::send_op(int peer, const void* data, size_t bytes, OpId id) {
  validate(Buffer{const_cast<void*>(data), bytes, DType::u64}, id, nullptr, "send");
  if (peer < 0 || peer >= world_) throw rf::InvalidInput(rf::str("send: peer ", peer, " of world size ", world_));
  return make_send(peer, data, bytes, id, rank_);
}

std::unique_ptr<Collective> UcxCommunicator::recv_op(int peer, void* data, size_t bytes, OpId id) {
  validate(Buffer{data, bytes, DType::u64}, id, nullptr, "recv");
  if (peer < 0 || peer >= world_) throw rf::InvalidInput(rf::str("recv: peer ", peer, " of world size ", world_));
  return make_recv(peer, data, bytes, id);
}

// Started asynchronously: the progress thread moves them while the caller computes.
WorkPtr UcxCommunicator::allreduce_start(Buffer buf, OpId id, Stream s) { return start(allreduce_op(buf, id, s), true); }
WorkPtr UcxCommunicator::broadcast_start(Buffer buf, int root, OpId id, Stream s) {
  return start(broadcast_op(buf, root, id, s), true);
}
WorkPtr UcxCommunicator::allgather_start(Buffer in, Buffer out, OpId id, Stream s) {
  return start(allgather_op(in, out, id, s), true);
}
WorkPtr UcxCommunicator::barrier_start(OpId id) { return start(barrier_op(id), true); }
WorkPtr UcxCommunicator::send_start(int peer, const void* data, size_t bytes, OpId id) {
  return start(send_op(peer, data, bytes, id), true);
}
WorkPtr UcxCommunicator::recv_start(int peer, void* data, size_t bytes, OpId id) {
  return start(recv_op(peer, data, bytes, id), true);
}

// Blocking: we are about to wait ourselves, so do not wake the progress thread just to
// take the driver lock back from it (on 2 cores shared by W ranks that costs 10-100 us);
// run_blocking() drives on this thread and allocates no Work.
void UcxCommunicator::allreduce(Buffer buf, OpId id) { run_blocking(allreduce_op(buf, id, nullptr)); }
void UcxCommunicator::broadcast(Buffer buf, int root, OpId id) { run_blocking(broadcast_op(buf, root, id, nullptr)); }
void UcxCommunicator::allgather(Buffer in, Buffer out, OpId id) {
  run_blocking(allgather_op(in, out, id, nullptr));
}
void UcxCommunicator::barrier(OpId id) { run_blocking(barrier_op(id)); }
void UcxCommunicator::send(int peer, const void* data, size_t bytes, OpId id) {
  run_blocking(send_op(peer, data, bytes, id));
}
void UcxCommunicator::recv(int peer, void* data, size_t bytes, OpId id) {
  run_blocking(recv_op(peer, data, bytes, id));
}

uint64_t UcxCommunicator::slot_allreduces() const { return shm_ ? shm_->slot_runs() : 0; }
uint64_t UcxCommunicator::zero_copy_allreduces() const { return shm_ ? shm_->zero_copy_runs() : 0; }

void UcxCommunicator::send_foreign_generation(int peer, uint64_t generation, OpId id, uint32_t chunk,
                                              const void* data, size_t bytes) {
  // A send whose tag says another generation; chunk is the receiver's expected chunk.
  class Stray : public Collective {
   public:
    Stray(int peer, const void* d, size_t n, OpId i, uint32_t ch)
        : Collective("send", i, 1), peer_(peer), d_(d), n_(n), ch_(ch) {}
    uint64_t bytes() const override { return n_; }
    bool point_to_point() const override { return true; }
    bool plan(int, uint64_t k, Round& r) override {
      if (k > 0) return false;
      r = Round{};
      r.chunk = ch_;
      r.send_peer = peer_;
      r.send_data = d_;
      r.send_bytes = n_;
      return true;
    }

   private:
    int peer_;
    const void* d_;
    size_t n_;
    uint32_t ch_;
  };
  auto c = std::make_unique<Stray>(peer, data, bytes, id, chunk);
  c->override_generation(generation);
  start(std::move(c), true)->wait();
}

}  // namespace rf::comm
