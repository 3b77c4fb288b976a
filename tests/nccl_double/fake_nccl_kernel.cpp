// The fake NCCL's "kernels": what a collective does once its stream reaches it. Kernels of
// one communicator take turns in call order. Each sends what it has to send (the sockets'
// readers buffer it: sends never wait for the receiver), then waits for each message it
// needs, checking that it is the operation, sequence number and size it expects, then
// computes and writes the output. All-reduce sums the contributions in rank order
// 0..W-1, so every rank gets the same bits.
//
// It never completes on its own without its data: it waits, polling the abort flag, and
// when the flag is set it ends leaving the output as it was. A dead peer sets the proxy's
// error (ncclRemoteError, which no revocation clears: fake_nccl_comm.h), a mismatch the
// communicator's own; then the kernel waits for the abort flag, as a real kernel hangs
// until NCCL aborts it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "tests/nccl_double/fake_cuda_internal.h"
#include "tests/nccl_double/fake_nccl_comm.h"

namespace rf_fake_nccl {

namespace {

const char* op_name(uint32_t k) {
  switch (static_cast<OpKind>(k)) {
    case OpKind::allreduce: return "AllReduce";
    case OpKind::broadcast: return "Broadcast";
    case OpKind::allgather: return "AllGather";
    case OpKind::send: return "Send";
    case OpKind::recv: return "Recv";
  }
  return "?";
}

bool aborted(const ncclComm& c) { return c.abort_flag.load(std::memory_order_acquire); }

// The end of a kernel that failed: the error first, then nothing until the abort flag.
void hang(ncclComm& c) {
  std::unique_lock lk(c.mu);
  c.cv.wait(lk, [&] { return aborted(c); });
}
void fail_and_hang(ncclComm& c, ncclResult_t r, const std::string& text) {
  set_async_error(c, r, text);
  hang(c);
}
// A dead peer: the proxy sees the socket closed and keeps the error (NCCL's net transport).
void peer_dead_and_hang(ncclComm& c, int peer, const std::string& why) {
  set_proxy_error(c, cat("remote process exited or there was a network error: rank ", peer, " (", why, ")"));
  hang(c);
}

template <typename T>
void reduce(T* acc, const T* x, size_t n, ncclRedOp_t op) {
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
      case ncclProd: acc[i] = static_cast<T>(acc[i] * x[i]); break;
      case ncclMax: acc[i] = std::max(acc[i], x[i]); break;
      case ncclMin: acc[i] = std::min(acc[i], x[i]); break;
      default: acc[i] = static_cast<T>(acc[i] + x[i]); break;
    }
  }
}

void reduce_into(void* acc, const void* x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8: return reduce(static_cast<int8_t*>(acc), static_cast<const int8_t*>(x), n, op);
    case ncclUint8: return reduce(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(x), n, op);
    case ncclInt32: return reduce(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
    case ncclUint32: return reduce(static_cast<uint32_t*>(acc), static_cast<const uint32_t*>(x), n, op);
    case ncclInt64: return reduce(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
    case ncclUint64: return reduce(static_cast<uint64_t*>(acc), static_cast<const uint64_t*>(x), n, op);
    case ncclFloat32: return reduce(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
    case ncclFloat64: return reduce(static_cast<double*>(acc), static_cast<const double*>(x), n, op);
    default: return;  // refused when called
  }
}

struct Kernel {
  ncclComm& c;
  std::string err;

  // false: aborted, or failed (the async error is set and we waited for the abort flag).
  bool send(int peer, MsgKind kind, const Op& op, const void* data, size_t bytes) {
    const Header h{kMsgMagic, kind, static_cast<uint32_t>(op.kind), static_cast<uint32_t>(op.peer), op.seq, bytes};
    if (send_message(c, peer, h, data, err)) return true;
    if (!err.empty()) peer_dead_and_hang(c, peer, err);
    return false;
  }

  // The next message of `kind` from `peer`, which must be `op` with `bytes`.
  bool receive(int peer, MsgKind kind, const Op& op, size_t bytes, Message& out) {
    std::unique_lock lk(c.mu);
    Peer& p = c.peers[static_cast<size_t>(peer)];
    for (;;) {
      if (aborted(c)) return false;
      if (!p.queue[kind].empty()) break;
      if (p.dead) {
        const std::string why = p.why;
        lk.unlock();
        peer_dead_and_hang(c, peer, why);
        return false;
      }
      c.cv.wait_for(lk, std::chrono::milliseconds(10));
    }
    out = std::move(p.queue[kind].front());
    p.queue[kind].pop_front();
    lk.unlock();
    const Header& h = out.h;
    const OpKind sent = op.kind == OpKind::recv ? OpKind::send : op.kind;  // what the peer ran
    if (h.op != static_cast<uint32_t>(sent) || h.seq != op.seq || h.bytes != bytes ||
        (op.kind == OpKind::broadcast && h.aux != static_cast<uint32_t>(op.peer))) {
      fail_and_hang(c, ncclInternalError,
                    cat("operation mismatch with rank ", peer, ": this rank runs nccl", op_name(uint32_t(op.kind)),
                           " #", op.seq, " of ", bytes, " bytes", op.kind == OpKind::broadcast ? " root " : "",
                           op.kind == OpKind::broadcast ? std::to_string(op.peer) : "", ", the peer sent nccl",
                           op_name(h.op), " #", h.seq, " of ", h.bytes, " bytes"));
      return false;
    }
    return true;
  }

  bool post(const Op& op) {
    const size_t bytes = op.count * type_size(op.type);
    switch (op.kind) {
      case OpKind::allreduce:
      case OpKind::allgather:
        for (int q = 0; q < c.nranks; ++q)
          if (q != c.rank && !send(q, kColl, op, op.sendbuff, bytes)) return false;
        return true;
      case OpKind::broadcast:
        if (op.peer == c.rank)
          for (int q = 0; q < c.nranks; ++q)
            if (q != c.rank && !send(q, kColl, op, op.sendbuff, bytes)) return false;
        return true;
      case OpKind::send: return send(op.peer, kP2p, op, op.sendbuff, bytes);
      case OpKind::recv: return true;
    }
    return true;
  }

  bool finish(const Op& op) {
    const size_t bytes = op.count * type_size(op.type);
    Message m;
    switch (op.kind) {
      case OpKind::allreduce: {
        std::vector<Message> from(static_cast<size_t>(c.nranks));
        for (int q = 0; q < c.nranks; ++q)
          if (q != c.rank && !receive(q, kColl, op, bytes, from[static_cast<size_t>(q)])) return false;
        std::vector<char> acc(bytes);
        for (int q = 0; q < c.nranks; ++q) {
          const void* x = q == c.rank ? op.sendbuff : from[static_cast<size_t>(q)].payload.data();
          if (q == 0) std::memcpy(acc.data(), x, bytes);
          else reduce_into(acc.data(), x, op.count, op.type, op.red);
        }
        if (aborted(c)) return false;
        std::memcpy(op.recvbuff, acc.data(), bytes);
        return true;
      }
      case OpKind::allgather: {
        std::vector<Message> from(static_cast<size_t>(c.nranks));
        for (int q = 0; q < c.nranks; ++q)
          if (q != c.rank && !receive(q, kColl, op, bytes, from[static_cast<size_t>(q)])) return false;
        if (aborted(c)) return false;
        char* out = static_cast<char*>(op.recvbuff);
        std::memmove(out + bytes * static_cast<size_t>(c.rank), op.sendbuff, bytes);  // may be in place
        for (int q = 0; q < c.nranks; ++q)
          if (q != c.rank) std::memcpy(out + bytes * static_cast<size_t>(q), from[static_cast<size_t>(q)].payload.data(), bytes);
        return true;
      }
      case OpKind::broadcast:
        if (op.peer == c.rank) {
          if (aborted(c)) return false;
          std::memmove(op.recvbuff, op.sendbuff, bytes);
          return true;
        }
        if (!receive(op.peer, kColl, op, bytes, m) || aborted(c)) return false;
        std::memcpy(op.recvbuff, m.payload.data(), bytes);
        return true;
      case OpKind::recv:
        if (!receive(op.peer, kP2p, op, bytes, m) || aborted(c)) return false;
        std::memcpy(op.recvbuff, m.payload.data(), bytes);
        return true;
      case OpKind::send: return true;
    }
    return true;
  }
};

void run(ncclComm& c, const std::vector<Op>& ops, uint64_t turn) {
  if (aborted(c)) return;  // reached after an abort or revocation: ends at once
  {
    std::unique_lock lk(c.mu);
    c.cv.wait(lk, [&] { return c.turn_run >= turn || aborted(c); });
    if (aborted(c)) return;
  }
  Kernel k{c, {}};
  for (const Op& op : ops)
    if (!k.post(op)) return;
  for (const Op& op : ops)
    if (!k.finish(op)) return;
}

}  // namespace

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

ncclResult_t launch(ncclComm& c, std::vector<Op> ops, cudaStream_t stream) {
  const uint64_t id = c.next_kernel;
  const uint64_t turn = c.turn_issued;
  ncclComm* comm = &c;
  const cudaError_t e = rf_fake_cuda::enqueue(stream, [comm, ops = std::move(ops), id, turn] {
    run(*comm, ops, turn);
    std::lock_guard lk(comm->mu);
    comm->live_kernels.erase(id);
    comm->turn_run = std::max(comm->turn_run, turn + 1);
    comm->cv.notify_all();
  });
  if (e != cudaSuccess) {
    c.last_error = "the stream does not exist (cudaErrorInvalidResourceHandle)";
    return ncclUnhandledCudaError;
  }
  ++c.next_kernel;
  ++c.turn_issued;
  c.live_kernels.insert(id);
  return ncclSuccess;
}

void wait_kernels(ncclComm& c, uint64_t upto) {
  std::unique_lock lk(c.mu);
  c.cv.wait(lk, [&] { return c.live_kernels.empty() || *c.live_kernels.begin() >= upto; });
}

}  // namespace rf_fake_nccl
