// The fake NCCL, part 1: unique ids, communicators (init, revoke, shrink, abort, destroy,
// finalize), their async state and their errors, as NCCL 2.28 documents them for a
// non-blocking communicator (config.blocking = 0); a blocking one waits for each job.
// Collectives are in fake_nccl_coll.cpp, kernels in fake_nccl_kernel.cpp, sockets in
// fake_nccl_net.cpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "tests/nccl_double/fake_cuda_internal.h"
#include "tests/nccl_double/fake_hooks.h"
#include "tests/nccl_double/fake_nccl_comm.h"

namespace rf_fake_nccl {

namespace {

std::atomic<int> g_live_comms{0};
std::mutex g_warning_mu;
std::string g_last_warning;           // ncclGetLastError's, process-wide (fake_nccl_comm.h)
thread_local std::string tl_returned;  // what ncclGetLastError returned last

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void job_main(ncclComm* c) {
  rf_fake_cuda::bind_thread(c->device);  // as NCCL's threads cudaSetDevice(comm->cudaDev)
  std::unique_lock lk(c->mu);
  for (;;) {
    c->cv.wait(lk, [&] { return !c->jobs.empty() || c->closing.load(); });
    if (c->jobs.empty()) return;
    Job job = std::move(c->jobs.front());
    c->jobs.pop_front();
    lk.unlock();
    const ncclResult_t r = job();
    lk.lock();
    c->job_result = r;
    --c->jobs_pending;
    c->cv.notify_all();
  }
}

ncclComm* make_comm(int rank, int nranks, int device, uint64_t id, bool blocking) {
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->id = id;
  c->blocking = blocking;
  const char* rc = std::getenv("NCCL_RUNTIME_CONNECT");  // NCCL reads it when a communicator is made
  c->runtime_connect = rc == nullptr || *rc == '\0' || std::atoi(rc) != 0;
  c->send_seq.assign(static_cast<size_t>(nranks), 0);
  c->recv_seq.assign(static_cast<size_t>(nranks), 0);
  rf_fake_cuda::account(device, static_cast<long long>(kFakeNcclCommBytes));
  ++g_live_comms;
  c->job_thread = std::thread(job_main, c);
  return c;
}

// The end of a communicator whose kernels have all ended. The struct itself is kept (its
// magic says dead), so a later call with the handle is refused rather than a crash.
void free_comm(ncclComm* c) {
  {
    std::lock_guard lk(c->mu);
    c->closing = true;
    c->cv.notify_all();
  }
  if (c->job_thread.joinable()) c->job_thread.join();
  stop_reader(*c);
  std::lock_guard lk(c->mu);
  c->peers.clear();
  rf_fake_cuda::account(c->device, -static_cast<long long>(kFakeNcclCommBytes));
  --g_live_comms;
  c->magic = kDeadMagic;
}

ncclResult_t settle_blocking(ncclComm* c) {
  std::unique_lock lk(c->mu);
  c->cv.wait(lk, [&] { return c->jobs_pending == 0; });
  return state_locked(*c);
}

// A handle that is not a live communicator: refused, loudly if it is one we freed.
ncclResult_t bad_comm(const ncclComm* c, const char* call) {
  if (c != nullptr && c->magic.load() == kDeadMagic)
    std::fprintf(stderr, "fake-nccl: %s on a communicator already aborted or destroyed\n", call);
  record_last_warning(std::string(call) + ": not a live communicator");
  log_call(nullptr, std::string(call) + "(bad comm)", ncclInvalidArgument);
  return ncclInvalidArgument;
}

ncclResult_t refuse(ncclComm* c, const std::string& call, ncclResult_t r, const std::string& why) {
  {
    std::lock_guard lk(c->mu);
    c->last_error = call + ": " + why;
  }
  log_call(c, call + " [" + why + "]", r);
  return r;
}

}  // namespace

bool log_on() {
  const char* v = std::getenv("RF_FAKE_NCCL_LOG");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

void log_call(const ncclComm* c, const std::string& call, ncclResult_t r) {
  if (!log_on()) return;
  if (c) std::fprintf(stderr, "fake-nccl rank %d: %s -> %s\n", c->rank, call.c_str(), result_name(r));
  else std::fprintf(stderr, "fake-nccl pid %d: %s -> %s\n", static_cast<int>(getpid()), call.c_str(), result_name(r));
}

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult?";
  }
}

bool live(const ncclComm* c) { return c != nullptr && c->magic.load() == kLiveMagic; }

ncclResult_t state_locked(const ncclComm& c) {
  if (c.jobs_pending > 0) return ncclInProgress;
  if (c.error != ncclSuccess) return c.error;
  if (c.job_result != ncclSuccess) return c.job_result;
  return c.proxy_error;
}

void set_async_error(ncclComm& c, ncclResult_t r, const std::string& text) {
  {
    std::lock_guard lk(c.mu);
    if (c.abort_flag.load() || c.error != ncclSuccess) return;
    c.error = r;
    c.last_error = text;
    c.cv.notify_all();
  }
  if (log_on()) std::fprintf(stderr, "fake-nccl rank %d: async error %s: %s\n", c.rank, result_name(r), text.c_str());
}

void set_proxy_error(ncclComm& c, const std::string& text) {
  {
    std::lock_guard lk(c.mu);
    if (c.abort_flag.load() || c.proxy_error != ncclSuccess) return;
    c.proxy_error = ncclRemoteError;
    c.last_error = text;
    c.cv.notify_all();
  }
  if (log_on()) std::fprintf(stderr, "fake-nccl rank %d: proxy error ncclRemoteError: %s\n", c.rank, text.c_str());
}

void check_group_job(const ncclComm& c, const char* call) {
  if (!c.group_job_freed) return;
  std::fprintf(stderr,
               "fake-nccl rank %d: %s touches the launch job that ncclCommRevoke freed while an operation was "
               "still launching (NCCL 2.28.9 never resets comm->groupJob: a use after free); aborting\n",
               c.rank, call);
  std::fflush(stderr);
  std::abort();
}

void push_job(ncclComm& c, Job job) {
  c.jobs.push_back(std::move(job));
  ++c.jobs_pending;
  c.cv.notify_all();
}

void record_last_warning(const std::string& text) {
  std::lock_guard lk(g_warning_mu);
  g_last_warning = text;
}

std::string last_warning() {
  std::lock_guard lk(g_warning_mu);
  return g_last_warning;
}

}  // namespace rf_fake_nccl

using namespace rf_fake_nccl;

extern "C" int rf_fake_nccl_live_comms(void) { return g_live_comms.load(); }

// ---- process-wide --------------------------------------------------------------------------

extern "C" ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* out) {
  if (out == nullptr) return ncclInvalidArgument;
  std::random_device rd;
  const uint64_t id = mix((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid()) ^
                          uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->internal, &id, sizeof id);
  std::memcpy(out->internal + 8, &kIdMagic, sizeof kIdMagic);
  log_call(nullptr, cat("ncclGetUniqueId(", std::hex, id, ")"), ncclSuccess);
  return ncclSuccess;
}

extern "C" const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (fake NCCL)";
    case ncclSystemError: return "unhandled system error (fake NCCL)";
    case ncclInternalError: return "internal error (fake NCCL)";
    case ncclInvalidArgument: return "invalid argument (fake NCCL)";
    case ncclInvalidUsage: return "invalid usage (fake NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

// The communicator is not looked at: NCCL's is one buffer for the process.
extern "C" const char* ncclGetLastError(ncclComm_t) {
  tl_returned = last_warning();
  return tl_returned.c_str();
}

// ---- communicators -------------------------------------------------------------------------

extern "C" ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                               ncclConfig_t* config) {
  const std::string call = cat("ncclCommInitRankConfig(nranks=", nranks, ", rank=", rank, ")");
  uint64_t magic = 0, sock = 0;
  std::memcpy(&sock, id.internal, sizeof sock);
  std::memcpy(&magic, id.internal + 8, sizeof magic);
  if (comm == nullptr || nranks < 1 || nranks > 64 || rank < 0 || rank >= nranks || magic != kIdMagic) {
    record_last_warning(call + ": invalid argument (or a unique id not from this double's ncclGetUniqueId)");
    log_call(nullptr, call, ncclInvalidArgument);
    return ncclInvalidArgument;
  }
  const int device = rf_fake_cuda::current_device();
  rf_fake_cuda::bind_thread(device);  // init makes the context of the current device
  ncclComm* c = make_comm(rank, nranks, device, sock, !(config && config->blocking == 0));
  *comm = c;
  {
    std::lock_guard lk(c->mu);
    push_job(*c, [c] {
      std::string err;
      const ncclResult_t r = connect_mesh(*c, [c] { return c->closing.load(); }, err);
      if (r != ncclSuccess) {
        std::lock_guard l(c->mu);
        c->last_error = "connecting to the peers: " + err;
        return r;
      }
      start_reader(*c);
      if (!c->runtime_connect) connect_setup(*c, [c] { return c->closing.load(); });
      return ncclSuccess;
    });
  }
  const ncclResult_t r = c->blocking ? settle_blocking(c) : ncclInProgress;
  log_call(c, cat(call, " on cuda:", device), r);
  return r;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

// CommCheck: a NULL communicator is an invalid argument.
extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!live(comm) || state == nullptr) return bad_comm(comm, "ncclCommGetAsyncError");
  std::lock_guard lk(comm->mu);
  *state = state_locked(*comm);
  if (*state == ncclSuccess) check_group_job(*comm, "ncclCommGetAsyncError");  // NCCL completes the job here
  if (log_on() && comm->logged_state != static_cast<int>(*state)) {
    comm->logged_state = static_cast<int>(*state);
    std::fprintf(stderr, "fake-nccl rank %d: ncclCommGetAsyncError -> %s\n", comm->rank, result_name(*state));
  }
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!live(comm) || count == nullptr) return bad_comm(comm, "ncclCommCount");
  *count = comm->nranks;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!live(comm) || rank == nullptr) return bad_comm(comm, "ncclCommUserRank");
  *rank = comm->rank;
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!live(comm) || device == nullptr) return bad_comm(comm, "ncclCommCuDevice");
  *device = comm->device;
  return ncclSuccess;
}

// Sets the abort flag: running kernels end, and so do those their streams reach later
// while it is set. The state reads ncclInProgress until every kernel enqueued so far has
// ended (a kernel behind a stuck one: never), then ncclSuccess (or the proxy's error), the
// flag cleared. A launch job still queued or running is cancelled and recorded as freed.
extern "C" ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  if (comm == nullptr) return ncclSuccess;
  if (!live(comm)) return bad_comm(comm, "ncclCommRevoke");
  const std::string call = cat("ncclCommRevoke(flags=", flags, ")");
  if (flags != NCCL_REVOKE_DEFAULT) return refuse(comm, call, ncclInvalidArgument, "flags must be NCCL_REVOKE_DEFAULT");
  {
    std::lock_guard lk(comm->mu);
    if (comm->revoked || comm->finalized) {
      comm->last_error = call + ": already revoked or finalized";
      log_call(comm, call, ncclInvalidArgument);
      return ncclInvalidArgument;
    }
    comm->abort_flag = true;
    comm->revoked = true;
    comm->error = ncclSuccess;
    comm->job_result = ncclSuccess;
    if (comm->launch_jobs > 0) comm->group_job_freed = true;
    const uint64_t upto = comm->next_kernel;
    push_job(*comm, [comm, upto] {
      wait_kernels(*comm, upto);
      std::lock_guard l(comm->mu);
      if (!comm->closing) comm->abort_flag = false;
      comm->cv.notify_all();
      return ncclSuccess;
    });
  }
  const ncclResult_t r = comm->blocking ? settle_blocking(comm) : ncclInProgress;
  log_call(comm, call, r);
  return r;
}

// *newcomm is NULL at once and until the child is connected; progress shows on the PARENT.
extern "C" ncclResult_t ncclCommShrink(ncclComm_t comm, int* excluded, int n, ncclComm_t* newcomm,
                                       ncclConfig_t* config, int flags) {
  if (!live(comm)) return bad_comm(comm, "ncclCommShrink");
  std::string call = cat("ncclCommShrink(n=", n, ", flags=", flags, ")");
  if (newcomm == nullptr || excluded == nullptr || n <= 0 || n >= comm->nranks || (flags & ~NCCL_SHRINK_ABORT) != 0)
    return refuse(comm, call, ncclInvalidArgument, "bad arguments");
  std::sort(excluded, excluded + n);  // NCCL sorts the caller's list in place
  call = cat("ncclCommShrink(excluded=[");
  for (int i = 0; i < n; ++i) call += cat(i ? "," : "", excluded[i]);
  call += cat("], flags=", flags, ")");
  if (std::adjacent_find(excluded, excluded + n) != excluded + n || excluded[0] < 0 || excluded[n - 1] >= comm->nranks)
    return refuse(comm, call, ncclInvalidArgument, "excluded ranks out of range or repeated");
  if (std::binary_search(excluded, excluded + n, comm->rank))
    return refuse(comm, call, ncclInvalidArgument, "the caller's own rank is excluded");
  const int new_rank = comm->rank - static_cast<int>(std::lower_bound(excluded, excluded + n, comm->rank) - excluded);
  const int new_n = comm->nranks - n;
  const bool abort_first = (flags & NCCL_SHRINK_ABORT) != 0;
  {
    std::unique_lock lk(comm->mu);
    if (comm->finalized) {
      lk.unlock();
      return refuse(comm, call, ncclInvalidArgument, "the communicator was finalized");
    }
    // ncclCommEnsureReady: unless aborting (or revoked and not yet quiescent), the parent
    // must be ready: in progress is misuse, an error is returned as it is.
    if (!comm->abort_flag.load() && !abort_first) {
      const ncclResult_t st = state_locked(*comm);
      if (st == ncclInProgress) {
        lk.unlock();
        return refuse(comm, call, ncclInvalidArgument, "the communicator is still in progress");
      }
      if (st != ncclSuccess) {
        lk.unlock();
        return refuse(comm, call, st, "the communicator has an error");
      }
    }
    *newcomm = nullptr;
    const uint64_t child_id = mix(comm->id ^ mix(++comm->shrinks));
    const bool blocking = config ? config->blocking != 0 : comm->blocking;
    // Behind a revocation's job (queued before it): runs once the parent is quiescent.
    push_job(*comm, [comm, newcomm, abort_first, new_rank, new_n, child_id, blocking] {
      if (abort_first) {
        uint64_t upto;
        {
          std::lock_guard l(comm->mu);
          comm->abort_flag = true;
          comm->cv.notify_all();
          upto = comm->next_kernel;
        }
        wait_kernels(*comm, upto);
        std::lock_guard l(comm->mu);
        if (!comm->closing) comm->abort_flag = false;
        comm->cv.notify_all();
      }
      {
        std::lock_guard l(comm->mu);  // ncclCommEnsureReady(parent): the proxy's error stays
        if (comm->proxy_error != ncclSuccess) {
          comm->last_error = "ncclCommShrink: the parent has an error (its proxy's, which revocation keeps)";
          return comm->proxy_error;
        }
      }
      ncclComm* child = make_comm(new_rank, new_n, comm->device, child_id, blocking);
      std::string err;
      const ncclResult_t r = connect_mesh(*child, [comm] { return comm->closing.load(); }, err);
      if (r != ncclSuccess) {
        free_comm(child);
        std::lock_guard l(comm->mu);
        comm->last_error = "ncclCommShrink: connecting the child: " + err;
        return r;
      }
      start_reader(*child);
      if (!child->runtime_connect) connect_setup(*child, [comm] { return comm->closing.load(); });
      __atomic_store_n(newcomm, child, __ATOMIC_RELEASE);
      return ncclSuccess;
    });
  }
  const ncclResult_t r = comm->blocking ? settle_blocking(comm) : ncclInProgress;
  log_call(comm, cat(call, ": child rank ", new_rank, " of ", new_n), r);
  return r;
}

// Sets the abort flag, then blocks until every kernel of this communicator enqueued so far
// has ended (as NCCL synchronizes its streams, which wait on the user's): behind a stuck
// kernel, forever. Cancels an init or shrink in progress.
extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (!live(comm) || comm->torn.exchange(true)) return bad_comm(comm, "ncclCommAbort");
  check_group_job(*comm, "ncclCommAbort");
  log_call(comm, "ncclCommAbort (begins)", ncclSuccess);
  {
    std::lock_guard lk(comm->mu);
    comm->abort_flag = true;
    comm->closing = true;
    comm->cv.notify_all();
  }
  if (comm->job_thread.joinable()) comm->job_thread.join();
  wait_kernels(*comm, UINT64_MAX);
  const int rank = comm->rank;
  free_comm(comm);
  if (log_on()) std::fprintf(stderr, "fake-nccl rank %d: ncclCommAbort -> ncclSuccess\n", rank);
  return ncclSuccess;
}

// Waits for the jobs and the kernels (no abort flag: a kernel waiting for a peer that
// never comes keeps it waiting), then frees.
extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (!live(comm) || comm->torn.exchange(true)) return bad_comm(comm, "ncclCommDestroy");
  check_group_job(*comm, "ncclCommDestroy");
  (void)settle_blocking(comm);
  wait_kernels(*comm, UINT64_MAX);
  log_call(comm, "ncclCommDestroy", ncclSuccess);
  free_comm(comm);
  return ncclSuccess;
}

extern "C" ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!live(comm)) return bad_comm(comm, "ncclCommFinalize");
  {
    std::lock_guard lk(comm->mu);
    if (comm->finalized) {
      comm->last_error = "ncclCommFinalize: called twice";
      return ncclInvalidUsage;
    }
    comm->finalized = true;
    const uint64_t upto = comm->next_kernel;
    push_job(*comm, [comm, upto] {
      wait_kernels(*comm, upto);
      return ncclSuccess;
    });
  }
  const ncclResult_t r = comm->blocking ? settle_blocking(comm) : ncclInProgress;
  log_call(comm, "ncclCommFinalize", r);
  return r;
}
