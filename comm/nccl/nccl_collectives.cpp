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
                                void* host_out, size_t host_out_bytes, const Enqueue& enqueue) {
  auto op = std::make_shared<NcclOp>();
  op->comm = this;
  op->target = WaitTarget{rank_, name, generation_, id.step, id.op};
  op->slot = slot;
  op->host_out = host_out;
  op->host_out_bytes = host_out_bytes;
  op->hook = std::strcmp(name, "all-reduce") == 0 && static_cast<bool>(on_chunk_);
  {
    std::lock_guard lk(loop_mu_);
    op->seq = recorder_.start(name, generation_, id.step, id.op, bytes);
    op->last_progress = Clock::now();
    if (poison_ || abort_flag_.load(std::memory_order_acquire) || drop_flag_.load(std::memory_order_acquire)) {
      pending_.push_back(op);  // the poll below fails it with the communicator's error
    } else {
      DeviceGuard g(device_);
      WaitObservation obs = observe_shared(Clock::now());
      auto cuda_failed = [&](cudaError_t e, const char* what) {
        obs.event = EventState::error;
        obs.event_error = rf::str(what, " on cuda:", device_, ": ", cuda_text(e));
      };
      if (free_events_.empty()) {
        cudaEvent_t e = nullptr;
        if (cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming); err != cudaSuccess)
          cuda_failed(err, "cudaEventCreate");
        else
          free_events_.push_back(e);
      }
      if (obs.event != EventState::error) {
        op->done = free_events_.back();
        free_events_.pop_back();
        auto s = static_cast<cudaStream_t>(caller);
        cudaError_t e = cudaSuccess;
        // Stream contract (communicator.h): our stream waits for the caller's work, the
        // caller's stream waits for ours; the host never synchronizes.
        if (device && (e = cudaEventRecord(ready_, s)) != cudaSuccess) cuda_failed(e, "cudaEventRecord(caller)");
        else if (device && (e = cudaStreamWaitEvent(stream_, ready_, 0)) != cudaSuccess)
          cuda_failed(e, "cudaStreamWaitEvent");
        if (obs.event != EventState::error) {
          op->enqueued = true;
          ncclResult_t r = enqueue(stream_);
          // Non-blocking: an enqueue may still be in progress; NCCL wants it settled
          // before the next call on the communicator.
          if (r == ncclInProgress) r = settle(comm_, Clock::now() + stall_timeout(), true);
          if (r != ncclSuccess && r != ncclInProgress) {
            obs.async = AsyncState::error;
            obs.async_code = static_cast<int>(r);
            obs.async_text = rf::str(name, " enqueue on cuda:", device_, ": ", nccl_text(comm_, r, false));
          }
        }
        if (obs.event != EventState::error && obs.async != AsyncState::error && !device && host_out &&
            (e = cudaMemcpyAsync(slot.host, slot.device, host_out_bytes, cudaMemcpyDeviceToHost, stream_)) !=
                cudaSuccess)
          cuda_failed(e, "cudaMemcpyAsync(device to host)");
        if (obs.event != EventState::error && obs.async != AsyncState::error) {
          if ((e = cudaEventRecord(op->done, stream_)) != cudaSuccess) cuda_failed(e, "cudaEventRecord(done)");
          else op->recorded = true;
        }
        if (op->recorded && device && (e = cudaStreamWaitEvent(s, op->done, 0)) != cudaSuccess)
          cuda_failed(e, "cudaStreamWaitEvent(caller)");
      }
      pending_.push_back(op);
      if (obs.event == EventState::error || obs.async == AsyncState::error) {
        obs.last_progress = op->last_progress;
        revoke(decide_wait(op->target, obs, WaitOptions{}));
      } else {
        // Chunk 1 before the poll below, which may already see the operation done and
        // call chunk 2; under loop_mu_ as chunk 2 is (the hook takes no loop_mu_).
        if (op->hook) on_chunk_(ChunkEvent{generation_, id.step, id.op, 1});
      }
    }
    (void)poll(op.get(), TimePoint::max());
  }
  cv_.notify_all();  // the watchdog watches the new operation
  return std::make_shared<NcclWork>(op, shared_from_this());
}

WorkPtr NcclCommunicator::allreduce_start(Buffer buf, OpId id, Stream stream) {
  check_buffer(buf, "all-reduce");
  const ncclDataType_t t = nccl_type(buf.dtype);
  if (buf.device == Device::cuda) {
    return start("all-reduce", id, buf.bytes(), stream, true, {}, nullptr, 0, [&](cudaStream_t s) {
      return ncclAllReduce(buf.data, buf.data, buf.count, t, ncclSum, comm_, s);
    });
  }
  StagingSlot slot = acquire_staging(device_, buf.bytes());
  std::memcpy(slot.host, buf.data, buf.bytes());
  return start("all-reduce", id, buf.bytes(), nullptr, false, slot, buf.data, buf.bytes(), [&](cudaStream_t s) {
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
    return start("broadcast", id, buf.bytes(), stream, true, {}, nullptr, 0, [&](cudaStream_t s) {
      return ncclBroadcast(buf.data, buf.data, buf.count, t, root, comm_, s);
    });
  }
  StagingSlot slot = acquire_staging(device_, buf.bytes());
  std::memcpy(slot.host, buf.data, buf.bytes());
  return start("broadcast", id, buf.bytes(), nullptr, false, slot, buf.data, buf.bytes(), [&](cudaStream_t s) {
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
    return start("all-gather", id, in.bytes(), stream, true, {}, nullptr, 0, [&](cudaStream_t s) {
      return ncclAllGather(in.data, out.data, in.count, t, comm_, s);
    });
  }
  StagingSlot slot = acquire_staging(device_, out.bytes());
  const size_t at = in.bytes() * static_cast<size_t>(rank_);
  std::memcpy(static_cast<char*>(slot.host) + at, in.data, in.bytes());
  return start("all-gather", id, in.bytes(), nullptr, false, slot, out.data, out.bytes(), [&](cudaStream_t s) {
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
  return start("barrier", id, 0, nullptr, false, slot, nullptr, 0, [&](cudaStream_t s) {
    return ncclAllReduce(slot.device, slot.device, 1, ncclFloat32, ncclSum, comm_, s);
  });
}

WorkPtr NcclCommunicator::send_start(int peer, const void* data, size_t bytes, OpId id) {
  if (peer < 0 || peer >= world_ || peer == rank_)
    throw rf::InvalidInput(rf::str("NCCL send: peer ", peer, " (rank ", rank_, " of ", world_, ")"));
  StagingSlot slot = acquire_staging(device_, bytes);
  std::memcpy(slot.host, data, bytes);
  return start("send", id, bytes, nullptr, false, slot, nullptr, 0, [&](cudaStream_t s) {
    if (cudaMemcpyAsync(slot.device, slot.host, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess)
      return ncclUnhandledCudaError;
    return ncclSend(slot.device, bytes, ncclUint8, peer, comm_, s);
  });
}

WorkPtr NcclCommunicator::recv_start(int peer, void* data, size_t bytes, OpId id) {
  if (peer < 0 || peer >= world_ || peer == rank_)
    throw rf::InvalidInput(rf::str("NCCL recv: peer ", peer, " (rank ", rank_, " of ", world_, ")"));
  StagingSlot slot = acquire_staging(device_, bytes);
  return start("recv", id, bytes, nullptr, false, slot, data, bytes, [&](cudaStream_t s) {
    return ncclRecv(slot.device, bytes, ncclUint8, peer, comm_, s);
  });
}


}  // namespace rf::comm::nccl
