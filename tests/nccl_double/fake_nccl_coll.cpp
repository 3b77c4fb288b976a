// The fake NCCL, part 2: the collective and point-to-point calls and groups. A call checks
// the communicator and its arguments as NCCL's ncclEnqueueCheck does, numbers the
// operation, and launches its kernel on the stream (fake_nccl_kernel.cpp).
//
// Launching, as NCCL 2.28.9 does: on a non-blocking communicator every call answers
// ncclInProgress and a launch job on the communicator's job thread enqueues the kernel
// (RF_FAKE_NCCL_INPROGRESS_MS=N: N ms later; default at once), the state reading
// ncclInProgress meanwhile. The first collective of a communicator made without
// NCCL_RUNTIME_CONNECT=0 also makes its connections inside that launch (connect_setup,
// RF_FAKE_NCCL_CONNECT_MS). A blocking communicator, one of a single rank, and an empty
// operation (count 0) launch in the call and answer ncclSuccess. A call while the state
// reads ncclInProgress breaks NCCL's rule for non-blocking communicators: it is refused
// with ncclInvalidArgument, which the double also makes the async error, so the misuse shows.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "tests/nccl_double/fake_cuda_internal.h"
#include "tests/nccl_double/fake_nccl_comm.h"

using namespace rf_fake_nccl;

namespace {

struct Grouped {
  ncclComm* comm;
  cudaStream_t stream;
  Op op;
};
thread_local int tl_group_depth = 0;
thread_local std::vector<Grouped> tl_group;

int env_ms(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const int ms = std::atoi(v);
  return ms > 0 ? ms : 0;
}

const char* type_name(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    default: return "unsupported";
  }
}

// The buffer must be device memory of the communicator's GPU, or pinned host memory
// (which a GPU can address). Empty when it is.
std::string buffer_problem(const ncclComm& c, const void* p, size_t bytes, const char* which) {
  if (bytes == 0) return {};
  int device = -1;
  switch (rf_fake_cuda::memory_kind(p, bytes, &device)) {
    case rf_fake_cuda::MemKind::pinned_host: return {};
    case rf_fake_cuda::MemKind::device_memory:
      if (device == c.device) return {};
      return cat(which, " is memory of cuda:", device, ", the communicator is on cuda:", c.device);
    case rf_fake_cuda::MemKind::pageable: break;
  }
  return cat(which, " (", bytes, " bytes at ", p, ") is not device memory (not inside a cudaMalloc block)");
}

std::atomic<int> g_runtime_connects{0};  // connections made inside a collective's launch

// The launch of `ops` on `stream` (one kernel): in the call, or by a launch job (see the
// top of this file). Caller holds c.mu.
ncclResult_t start(ncclComm& c, std::vector<Op> ops, cudaStream_t stream) {
  const bool empty = std::all_of(ops.begin(), ops.end(), [](const Op& op) { return op.count == 0; });
  if (c.blocking || c.nranks == 1 || empty) return launch(c, std::move(ops), stream);
  const bool connect = c.runtime_connect && !c.connected;
  c.connected = true;  // from now on a later call finds the connections made
  const int ms = env_ms("RF_FAKE_NCCL_INPROGRESS_MS", 0);
  ncclComm* comm = &c;
  ++c.launch_jobs;
  push_job(c, [comm, ops = std::move(ops), stream, ms, connect] {
    auto cancelled = [comm] { return comm->closing.load() || comm->revoked; };
    if (connect) {
      connect_setup(*comm, cancelled);
      g_runtime_connects.fetch_add(1);
    }
    std::unique_lock lk(comm->mu);
    comm->cv.wait_for(lk, std::chrono::milliseconds(ms), cancelled);
    --comm->launch_jobs;
    if (cancelled()) return ncclSuccess;  // never reaches the stream
    return launch(*comm, ops, stream);
  });
  return ncclInProgress;
}

ncclResult_t issue(const char* name, ncclComm* c, Op op, cudaStream_t stream) {
  std::string call = cat(name, "(count=", op.count, ", ", type_name(op.type));
  if (op.kind == OpKind::broadcast) call += cat(", root=", op.peer);
  if (op.kind == OpKind::send || op.kind == OpKind::recv) call += cat(", peer=", op.peer);
  call += ")";
  if (!live(c)) {
    log_call(nullptr, call + " [not a live communicator]", ncclInvalidArgument);
    return ncclInvalidArgument;
  }
  std::unique_lock lk(c->mu);
  auto refuse = [&](ncclResult_t r, const std::string& why, bool sticky) {
    c->last_error = cat(name, ": ", why);
    if (sticky && c->error == ncclSuccess) c->error = r;
    lk.unlock();
    log_call(c, cat(call, " [", why, "]"), r);
    return r;
  };
  if (c->revoked) return refuse(ncclInvalidUsage, "the communicator was revoked", false);
  if (c->finalized) return refuse(ncclInvalidUsage, "the communicator was finalized", false);
  if (c->jobs_pending > 0)
    return refuse(ncclInvalidArgument,
                  "called while ncclCommGetAsyncError reads ncclInProgress (NCCL allows no call on a non-blocking "
                  "communicator until it reads ncclSuccess)",
                  true);
  if (const ncclResult_t st = state_locked(*c); st != ncclSuccess) return refuse(st, "the communicator has an error", false);
  const size_t ts = type_size(op.type);
  if (ts == 0) return refuse(ncclInvalidArgument, "datatype not supported by the double", false);
  if (op.kind == OpKind::allreduce && op.red != ncclSum && op.red != ncclProd && op.red != ncclMax && op.red != ncclMin)
    return refuse(ncclInvalidArgument, "reduction not supported by the double", false);
  if (op.peer < -1 || op.peer >= c->nranks || ((op.kind == OpKind::broadcast || op.kind == OpKind::send ||
                                                  op.kind == OpKind::recv) && op.peer < 0))
    return refuse(ncclInvalidArgument, "root or peer out of range", false);
  if ((op.kind == OpKind::send || op.kind == OpKind::recv) && op.peer == c->rank)
    return refuse(ncclInvalidArgument, "send/recv to itself is not supported by the double", false);
  const size_t bytes = op.count * ts;
  std::string bad;
  const bool reads = op.kind != OpKind::recv && (op.kind != OpKind::broadcast || op.peer == c->rank);
  if (reads) bad = buffer_problem(*c, op.sendbuff, bytes, "sendbuff");
  const size_t out_bytes = op.kind == OpKind::allgather ? bytes * static_cast<size_t>(c->nranks) : bytes;
  if (bad.empty() && op.kind != OpKind::send) bad = buffer_problem(*c, op.recvbuff, out_bytes, "recvbuff");
  if (!bad.empty()) return refuse(ncclInvalidArgument, bad, false);
  if (const int d = rf_fake_cuda::stream_device(stream); d != c->device)
    return refuse(ncclUnhandledCudaError,
                  d < 0 ? std::string("the stream does not exist")
                        : cat("the stream belongs to cuda:", d, ", the communicator to cuda:", c->device),
                  false);
  if (op.kind == OpKind::send) op.seq = c->send_seq[static_cast<size_t>(op.peer)]++;
  else if (op.kind == OpKind::recv) op.seq = c->recv_seq[static_cast<size_t>(op.peer)]++;
  else op.seq = c->coll_seq++;
  call += cat(" #", op.seq);
  if (tl_group_depth > 0) {
    tl_group.push_back(Grouped{c, stream, op});
    lk.unlock();
    log_call(c, call + " (grouped)", ncclSuccess);
    return ncclSuccess;
  }
  const ncclResult_t r = start(*c, {op}, stream);
  lk.unlock();
  log_call(c, call, r);
  return r;
}

}  // namespace

namespace rf_fake_nccl {

int connect_ms() { return env_ms("RF_FAKE_NCCL_CONNECT_MS", 50); }

void connect_setup(ncclComm& c, const std::function<bool()>& cancelled) {
  std::unique_lock lk(c.mu);
  c.cv.wait_for(lk, std::chrono::milliseconds(connect_ms()), cancelled);
  c.connected = true;
}

}  // namespace rf_fake_nccl

extern "C" int rf_fake_nccl_runtime_connects(void) { return g_runtime_connects.load(); }

extern "C" ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                                      ncclRedOp_t red, ncclComm_t comm, cudaStream_t stream) {
  return issue("ncclAllReduce", comm, Op{OpKind::allreduce, sendbuff, recvbuff, count, type, red, -1, 0}, stream);
}

extern "C" ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type, int root,
                                      ncclComm_t comm, cudaStream_t stream) {
  return issue("ncclBroadcast", comm, Op{OpKind::broadcast, sendbuff, recvbuff, count, type, ncclSum, root, 0}, stream);
}

extern "C" ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, type, root, comm, stream);
}

// In place when sendbuff = recvbuff + rank * sendcount.
extern "C" ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t type,
                                      ncclComm_t comm, cudaStream_t stream) {
  return issue("ncclAllGather", comm, Op{OpKind::allgather, sendbuff, recvbuff, sendcount, type, ncclSum, -1, 0}, stream);
}

extern "C" ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                 cudaStream_t stream) {
  return issue("ncclSend", comm, Op{OpKind::send, sendbuff, nullptr, count, type, ncclSum, peer, 0}, stream);
}

extern "C" ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                 cudaStream_t stream) {
  return issue("ncclRecv", comm, Op{OpKind::recv, nullptr, recvbuff, count, type, ncclSum, peer, 0}, stream);
}

extern "C" ncclResult_t ncclGroupStart() {
  ++tl_group_depth;
  return ncclSuccess;
}

// One kernel per communicator for the group's operations (on the stream of its first),
// which sends everything first: a send and a recv that need each other can be grouped.
extern "C" ncclResult_t ncclGroupEnd() {
  if (tl_group_depth == 0) return ncclInvalidUsage;
  if (--tl_group_depth > 0) return ncclSuccess;
  std::vector<Grouped> group = std::move(tl_group);
  tl_group.clear();
  ncclResult_t result = ncclSuccess;
  std::vector<ncclComm*> comms;
  for (const Grouped& g : group)
    if (std::find(comms.begin(), comms.end(), g.comm) == comms.end()) comms.push_back(g.comm);
  for (ncclComm* c : comms) {
    std::vector<Op> ops;
    cudaStream_t stream = nullptr;
    for (const Grouped& g : group)
      if (g.comm == c) {
        if (ops.empty()) stream = g.stream;
        ops.push_back(g.op);
      }
    if (!live(c)) {
      result = ncclInvalidArgument;
      continue;
    }
    std::lock_guard lk(c->mu);
    const ncclResult_t r = start(*c, std::move(ops), stream);
    if (r != ncclSuccess && result == ncclSuccess) result = r;
    log_call(c, "ncclGroupEnd", r);
  }
  return result;
}
