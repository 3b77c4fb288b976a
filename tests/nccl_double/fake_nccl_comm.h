#pragma once
// The fake NCCL's communicator, private to fake_nccl_*.cpp.
//
// State. A communicator runs its background jobs (connecting, revoking, shrinking, and
// the launches of a non-blocking communicator's collectives) one after the other on a
// thread of its own. ncclCommGetAsyncError reads, as NCCL 2.28.9's does: ncclInProgress
// while a job is queued or running (NCCL's comm->asyncResult while its job thread runs),
// else the communicator's own sticky error (a mismatch; a call that broke the rules), else
// the last job's result, else the proxy's error. ncclCommRevoke clears the communicator's
// own error and result, never the proxy's: a kernel that met a dead peer (its socket
// closed) leaves ncclRemoteError there for good, as NCCL's proxy does in
// proxyState->asyncResult, so a revoked communicator settles with it and a shrink of it fails.
//
// Launch jobs. A revocation while a launch job is queued or running models NCCL freeing
// the group job without resetting comm->groupJob: the double records it, and the next
// ncclCommGetAsyncError that would read ncclSuccess, ncclCommAbort or ncclCommDestroy on
// that communicator prints why and aborts the process (a use after free, caught).
//
// Kernels. A collective is a task on the caller's stream (fake_cuda_internal.h). Kernels
// of one communicator take turns in the order they were called (the order their messages
// go out); each first sends what it has to send, then waits for what it needs, polling
// the abort flag, and writes its output only once it has everything.
//
// Network: a full mesh of Unix stream sockets (abstract names: no files), one reader
// thread that files every arriving message under its peer and kind.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace rf_fake_nccl {

inline constexpr uint64_t kLiveMagic = 0x72666e63636c4f4bull;  // "rfncclOK"
inline constexpr uint64_t kDeadMagic = 0x72666e63636c4445ull;
inline constexpr uint64_t kIdMagic = 0x72662d6e63636c31ull;    // in every ncclUniqueId we make
inline constexpr uint32_t kMsgMagic = 0x72666d31u;              // in every message header

enum class OpKind : uint32_t { allreduce = 1, broadcast, allgather, send, recv };
enum MsgKind : uint32_t { kColl = 0, kP2p = 1 };

struct Op {
  OpKind kind = OpKind::allreduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t red = ncclSum;
  int peer = -1;      // broadcast: the root; send/recv: the peer
  uint64_t seq = 0;   // collectives: the communicator's count; send/recv: per peer
};

struct Header {
  uint32_t magic, kind, op, aux;  // aux: broadcast's root
  uint64_t seq, bytes;
};

struct Message {
  Header h{};
  std::vector<char> payload;
};

struct Peer {
  int fd = -1;
  std::deque<Message> queue[2];  // by MsgKind
  bool dead = false;
  std::string why;
  // the reader's partial message
  Header h{};
  size_t got = 0;
  bool in_payload = false;
  std::vector<char> payload;
};

using Job = std::function<ncclResult_t()>;

template <typename... A>
std::string cat(const A&... a) {
  std::ostringstream o;
  (o << ... << a);
  return o.str();
}

// ncclGetLastError, as NCCL 2.28.9's: one buffer for the whole process (debug.cc's
// ncclLastError), the last warning of any thread and any communicator, never cleared.
// Every error the double records goes there.
void record_last_warning(const std::string& text);
std::string last_warning();
struct LastError {
  std::string text;
  LastError& operator=(std::string t) {
    record_last_warning(t);
    text = std::move(t);
    return *this;
  }
};

}  // namespace rf_fake_nccl

struct ncclComm {
  std::atomic<uint64_t> magic{rf_fake_nccl::kLiveMagic};
  int rank = 0, nranks = 1, device = 0;
  uint64_t id = 0;  // names the sockets
  bool blocking = false;

  std::mutex mu;
  std::condition_variable cv;  // any change below; kernels and jobs wait on it
  ncclResult_t error = ncclSuccess;
  ncclResult_t job_result = ncclSuccess;
  ncclResult_t proxy_error = ncclSuccess;  // a kernel met a dead peer; never reset
  int jobs_pending = 0;
  int launch_jobs = 0;            // launch jobs queued or running
  bool group_job_freed = false;   // ncclCommRevoke ran while launch_jobs > 0
  bool runtime_connect = true;    // NCCL_RUNTIME_CONNECT was not 0 when it was made
  bool connected = false;         // its connections are made (at init, or in its first collective)
  std::deque<rf_fake_nccl::Job> jobs;
  std::thread job_thread;
  std::atomic<bool> closing{false};  // abort or destroy: jobs give up
  std::atomic<bool> abort_flag{false};  // set and cleared under mu (waiters use cv)
  std::atomic<bool> torn{false};        // ncclCommAbort or ncclCommDestroy began
  bool revoked = false, finalized = false;
  rf_fake_nccl::LastError last_error;
  int logged_state = -1;  // RF_FAKE_NCCL_LOG: the async state last printed

  uint64_t next_kernel = 0;
  std::set<uint64_t> live_kernels;
  uint64_t turn_issued = 0, turn_run = 0;
  uint64_t coll_seq = 0;
  std::vector<uint64_t> send_seq, recv_seq;
  uint64_t shrinks = 0;

  std::vector<rf_fake_nccl::Peer> peers;
  std::thread reader;
  int wake_fd = -1;
  std::atomic<bool> reader_stop{false};
};

namespace rf_fake_nccl {

// ---- fake_nccl_net.cpp --------------------------------------------------------------------
// Connects rank `c.rank` of `c.nranks` under `c.id` to every peer (waits for late peers
// until `cancelled`); fills c.peers. ncclSystemError with `err` on a socket failure.
ncclResult_t connect_mesh(ncclComm& c, const std::function<bool()>& cancelled, std::string& err);
void start_reader(ncclComm& c);
void stop_reader(ncclComm& c);  // joins it and closes the sockets
// Writes one message to `peer`; false with `err` when the peer is gone, or when the abort
// flag was set (err empty then).
bool send_message(ncclComm& c, int peer, const Header& h, const void* data, std::string& err);

// ---- fake_nccl_kernel.cpp ----------------------------------------------------------------------
// Enqueues one kernel running `ops` on `stream`. Caller holds c.mu.
ncclResult_t launch(ncclComm& c, std::vector<Op> ops, cudaStream_t stream);
// Waits until every kernel of `c` with an id below `upto` has ended.
void wait_kernels(ncclComm& c, uint64_t upto);
size_t type_size(ncclDataType_t t);  // 0: not supported by the double

// ---- fake_nccl_init.cpp ------------------------------------------------------------------
bool log_on();
void log_call(const ncclComm* c, const std::string& call, ncclResult_t r);
const char* result_name(ncclResult_t r);
// A comm that is live (made by us, not yet freed).
bool live(const ncclComm* c);
// The state ncclCommGetAsyncError reports. Caller holds c.mu.
ncclResult_t state_locked(const ncclComm& c);
// Sets the sticky error (first one wins), unless an abort or revocation is under way.
void set_async_error(ncclComm& c, ncclResult_t r, const std::string& text);
// Sets the proxy's error (ncclRemoteError, first one wins), unless an abort or revocation
// is under way: a kernel met a dead peer. Nothing resets it.
void set_proxy_error(ncclComm& c, const std::string& text);
void push_job(ncclComm& c, Job job);  // caller holds c.mu
// The connection setup NCCL does at init with NCCL_RUNTIME_CONNECT=0, else inside the
// first collective's launch: RF_FAKE_NCCL_CONNECT_MS (default 50) on the calling job, ended
// early by `cancelled`. Marks `c` connected. Caller does not hold c.mu.
void connect_setup(ncclComm& c, const std::function<bool()>& cancelled);
int connect_ms();
// Dies loudly when a call touches the launch job a revocation freed (see "Launch jobs").
void check_group_job(const ncclComm& c, const char* call);

}  // namespace rf_fake_nccl
