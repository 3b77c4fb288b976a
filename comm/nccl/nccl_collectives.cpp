// The NCCL backend: starting operations, the one path each takes (the stream contract of
// comm/communicator.h), and the host buffers' staging (staging.h).
#include <cstring>

#include "comm/nccl/nccl_impl.h"

namespace rf::comm::nccl {

// ---- starting ------------------------------------------------------------------------

void NcclCommunicator::check_buffer(const Buffer& b, const char* what) const {
  if (b.device == Device::cuda && b.device_index != device_)
    throw rf::InvalidInput(rf::str("NCCL ", what, " g=", generation_, ": buffer on cuda:", b.device_index,
                                   ", the communicator is on cuda:", device_));
  if (b.registered != nullptr &&
      (b.registered->device() != b.device || !b.registered->contains(b.data, b.bytes()) ||
       (b.device == Device::cuda && b.registered->device_index() != b.device_index)))
    throw rf::InvalidInput(rf::str("NCCL ", what, " g=", generation_, ": the buffer (", b.bytes(),
                                   " bytes) is not inside the registered memory it names, or on another device"));
}

WorkPtr NcclCommunicator::start(const char* name, OpId id, size_t bytes, Stream caller, bool device, StagingSlot slot,
                                void* host_out, size_t host_out_bytes, Enqueue enqueue) {
  auto op = std::make_shared<NcclOp>();
  op->comm = this;
  op->target = WaitTarget{rank_, name, generation_, id.step, id.op};
  op->enqueue = std::move(enqueue);
  op->slot = slot;
  op->host_out = host_out;
  op->host_out_bytes = host_out_bytes;
  op->hook = std::strcmp(name, "all-reduce") == 0 && static_cast<bool>(on_chunk_);
  {
    std::lock_guard lk(loop_mu_);
    op->seq = recorder_.start(name, generation_, id.step, id.op, bytes);
    op->started_at = op->last_progress = Clock::now();
    pending_.push_back(op);
    // Poisoned, aborted or dropped: the poll below fails it with the communicator's error.
    if (!poison_ && !abort_flag_.load(std::memory_order_acquire) && !drop_flag_.load(std::memory_order_acquire)) {
      bind_device(device_);
      WaitObservation failed;
      // The caller's stream as it is now: the buffer's producer is done at this mark. Our
      // stream waits for it when the operation launches (maybe later, see "Launching").
      bool ok = true;
      if (device) {
        op->ready = take_event(failed);
        ok = op->ready != nullptr;
        if (ok) {
          if (const cudaError_t e = cudaEventRecord(op->ready, static_cast<cudaStream_t>(caller)); e != cudaSuccess) {
            failed.event = EventState::error;
            failed.event_error = rf::str("cudaEventRecord(caller's stream) on cuda:", device_, ": ", cuda_text(e));
            ok = false;
          }
        }
      }
      if (ok) ok = advance_launches(failed);
      if (!ok) {
        failed.now = Clock::now();
        failed.last_progress = pending_.front()->last_progress;
        revoke(decide_wait(pending_.front()->target, failed, WaitOptions{}));
      }
    }
    (void)poll(op.get(), TimePoint::max());
  }
  cv_.notify_all();  // the watchdog watches the new operation
  return std::make_shared<NcclWork>(op, shared_from_this());
}

// ---- launching (nccl_impl.h, "Launching") --------------------------------------------

namespace {

bool cuda_ok(cudaError_t e, const char* what, int device, WaitObservation& failed) {
  if (e == cudaSuccess) return true;
  failed.event = EventState::error;
  failed.event_error = rf::str(what, " on cuda:", device, ": ", cuda_text(e));
  return false;
}

}  // namespace

cudaEvent_t NcclCommunicator::take_event(WaitObservation& failed) {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  return cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", device_, failed) ? e : nullptr;
}

bool NcclCommunicator::advance_launches(WaitObservation& failed) {
  for (auto& p : pending_) {
    NcclOp& op = *p;
    if (op.launch == NcclOp::Launch::launched) continue;
    if (op.launch == NcclOp::Launch::launching) {
      ncclResult_t st = ncclSuccess;
      if (const ncclResult_t r = ncclCommGetAsyncError(comm_, &st); r != ncclSuccess) st = r;
      if (st == ncclInProgress) return true;  // NCCL allows nothing else until it settles
      if (st != ncclSuccess) {
        failed.async = AsyncState::error;
        failed.async_code = static_cast<int>(st);
        failed.async_text = rf::str(op.target.collective, " launch on cuda:", device_, ": ", nccl_text(comm_, st, false));
        return false;
      }
      if (!complete_launch(op, failed)) return false;
      continue;
    }
    if (!launch(op, failed)) return false;
    if (op.launch != NcclOp::Launch::launched) return true;
  }
  return true;
}

bool NcclCommunicator::launch(NcclOp& op, WaitObservation& failed) {
  op.started = take_event(failed);
  if (op.started == nullptr) return false;
  op.done = take_event(failed);
  if (op.done == nullptr) return false;
  op.on_stream = true;
  if (op.ready && !cuda_ok(cudaStreamWaitEvent(stream_, op.ready, 0), "cudaStreamWaitEvent", device_, failed))
    return false;
  if (!cuda_ok(cudaEventRecord(op.started, stream_), "cudaEventRecord(start)", device_, failed)) return false;
  const ncclResult_t r = op.enqueue(stream_);
  // Chunk 1 of an all-reduce: handed to NCCL (under loop_mu_, as chunk 2 is; the hook
  // takes no loop_mu_).
  if (op.hook) on_chunk_(ChunkEvent{generation_, op.target.step, op.target.op, 1});
  if (r == ncclInProgress) {
    op.launch = NcclOp::Launch::launching;
    return true;
  }
  if (r != ncclSuccess) {
    failed.async = AsyncState::error;
    failed.async_code = static_cast<int>(r);
    failed.async_text = rf::str(op.target.collective, " on cuda:", device_, ": ", nccl_text(comm_, r, false));
    return false;
  }
  return complete_launch(op, failed);
}

bool NcclCommunicator::complete_launch(NcclOp& op, WaitObservation& failed) {
  if (op.host_out && !cuda_ok(cudaMemcpyAsync(op.slot.host, op.slot.device, op.host_out_bytes, cudaMemcpyDeviceToHost,
                                              stream_),
                              "cudaMemcpyAsync(device to host)", device_, failed))
    return false;
  if (!cuda_ok(cudaEventRecord(op.done, stream_), "cudaEventRecord(done)", device_, failed)) return false;
  op.launch = NcclOp::Launch::launched;
  return true;
}

// ---- the operations --------------------------------------------------------------------
// Each captures what its NCCL call needs by value: the call may be made later, by whichever
// thread polls when the one ahead of it settles.

WorkPtr NcclCommunicator::allreduce_start(Buffer buf, OpId id, Stream stream) {
  check_buffer(buf, "all-reduce");
  const ncclDataType_t t = nccl_type(buf.dtype);
  if (buf.device == Device::cuda) {
    return start("all-reduce", id, buf.bytes(), stream, true, {}, nullptr, 0, [=, this](cudaStream_t s) {
      return ncclAllReduce(buf.data, buf.data, buf.count, t, ncclSum, comm_, s);
    });
  }
  StagingSlot slot = acquire_staging(device_, buf.bytes());
  std::memcpy(slot.host, buf.data, buf.bytes());
  return start("all-reduce", id, buf.bytes(), nullptr, false, slot, buf.data, buf.bytes(), [=, this](cudaStream_t s) {
    if (cudaMemcpyAsync(slot.device, slot.host, buf.bytes(), cudaMemcpyHostToDevice, s) != cudaSuccess)
      return ncclUnhandledCudaError;
    return ncclAllReduce(slot.device, slot.device, buf.count, t, ncclSum, comm_, s);
  });
}

WorkPtr NcclCommunicator::broadcast_start(Buffer buf, int root, OpId id, Stream stream) {
  if (root < 0 || root >= world_) throw rf::InvalidInput(rf::str("NCCL broadcast: root ", root, " of world ", world_));
  check_buffer(buf, "broadcast");
  const ncclDataType_t t = nccl_type(buf.dtype);
  if (buf.device == Device::cuda) {
    return start("broadcast", id, buf.bytes(), stream, true, {}, nullptr, 0, [=, this](cudaStream_t s) {
      return ncclBroadcast(buf.data, buf.data, buf.count, t, root, comm_, s);
    });
  }
  StagingSlot slot = acquire_staging(device_, buf.bytes());
  std::memcpy(slot.host, buf.data, buf.bytes());
  return start("broadcast", id, buf.bytes(), nullptr, false, slot, buf.data, buf.bytes(), [=, this](cudaStream_t s) {
    if (cudaMemcpyAsync(slot.device, slot.host, buf.bytes(), cudaMemcpyHostToDevice, s) != cudaSuccess)
      return ncclUnhandledCudaError;
    return ncclBroadcast(slot.device, slot.device, buf.count, t, root, comm_, s);
  });
}

WorkPtr NcclCommunicator::allgather_start(Buffer in, Buffer out, OpId id, Stream stream) {
  if (out.count != in.count * static_cast<size_t>(world_) || out.dtype != in.dtype || out.device != in.device)
    throw rf::InvalidInput(rf::str("NCCL all-gather: out has ", out.count, " elements, needs ", world_, " x ", in.count,
                                   " of the same dtype and device"));
  check_buffer(in, "all-gather");
  check_buffer(out, "all-gather");
  const ncclDataType_t t = nccl_type(in.dtype);
  if (in.device == Device::cuda) {
    return start("all-gather", id, in.bytes(), stream, true, {}, nullptr, 0, [=, this](cudaStream_t s) {
      return ncclAllGather(in.data, out.data, in.count, t, comm_, s);
    });
  }
  StagingSlot slot = acquire_staging(device_, out.bytes());
  const size_t at = in.bytes() * static_cast<size_t>(rank_);
  std::memcpy(static_cast<char*>(slot.host) + at, in.data, in.bytes());
  return start("all-gather", id, in.bytes(), nullptr, false, slot, out.data, out.bytes(), [=, this](cudaStream_t s) {
    char* dev = static_cast<char*>(slot.device);
    if (cudaMemcpyAsync(dev + at, static_cast<char*>(slot.host) + at, in.bytes(), cudaMemcpyHostToDevice, s) !=
        cudaSuccess)
      return ncclUnhandledCudaError;
    return ncclAllGather(dev + at, dev, in.count, t, comm_, s);  // in place: NCCL allows sendbuff = recvbuff + rank*n
  });
}

WorkPtr NcclCommunicator::barrier_start(OpId id) {
  // An all-reduce of one float in staging: returns on every rank only once all reached it.
  StagingSlot slot = acquire_staging(device_, sizeof(float));
  return start("barrier", id, 0, nullptr, false, slot, nullptr, 0, [=, this](cudaStream_t s) {
    return ncclAllReduce(slot.device, slot.device, 1, ncclFloat32, ncclSum, comm_, s);
  });
}

WorkPtr NcclCommunicator::send_start(int peer, const void* data, size_t bytes, OpId id) {
  if (peer < 0 || peer >= world_ || peer == rank_)
    throw rf::InvalidInput(rf::str("NCCL send: peer ", peer, " (rank ", rank_, " of ", world_, ")"));
  StagingSlot slot = acquire_staging(device_, bytes);
  std::memcpy(slot.host, data, bytes);
  return start("send", id, bytes, nullptr, false, slot, nullptr, 0, [=, this](cudaStream_t s) {
    if (cudaMemcpyAsync(slot.device, slot.host, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess)
      return ncclUnhandledCudaError;
    return ncclSend(slot.device, bytes, ncclUint8, peer, comm_, s);
  });
}

WorkPtr NcclCommunicator::recv_start(int peer, void* data, size_t bytes, OpId id) {
  if (peer < 0 || peer >= world_ || peer == rank_)
    throw rf::InvalidInput(rf::str("NCCL recv: peer ", peer, " (rank ", rank_, " of ", world_, ")"));
  StagingSlot slot = acquire_staging(device_, bytes);
  return start("recv", id, bytes, nullptr, false, slot, data, bytes, [=, this](cudaStream_t s) {
    return ncclRecv(slot.device, bytes, ncclUint8, peer, comm_, s);
  });
}


}  // namespace rf::comm::nccl
