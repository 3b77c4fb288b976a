#pragma once
// Communicator — what the rest of ringfence sees of the data plane: collectives on typed
// buffers of one generation, asynchronous, abortable from any thread. Callers make one with
// make_communicator(backend, options) below and see nothing of the backend behind it: the
// trainer and the reducer include this header and no backend's. Backends: UCX (comm/ucx/,
// host memory; device memory through pinned host staging, comm/cuda/device_staging.h) and
// NCCL (comm/nccl/, device memory), whose CUDA halves a program installs with
// register_cuda_comm() (comm/cuda/register.h, library rf_comm_cuda).
//
// Contract
// * Every collective is named by an OpId (step, op) which becomes its tag with the
//   communicator's generation (comm/tag.h). All ranks must start the same collectives in
//   the same order; a communicator runs them one after the other, so several outstanding
//   collectives (gradient buckets) complete in the order they were started.
// * Buffers stay valid and untouched until the collective's Work finished (done or failed).
// * Device buffers and streams: for a buffer on a device, `stream` (a cudaStream_t) is the
//   stream its producer enqueued its writes on. The collective reads the buffer only after
//   all work enqueued on `stream` before the call, and work enqueued on `stream` after the
//   Work finished (test() returned true, or wait() returned) sees the result. A host
//   buffer takes no stream (null).
// * Failures are typed (comm/errors.h). After one failure the communicator is poisoned:
//   every pending and future operation fails with that error (or Aborted after abort()).
// * all-reduce delivers bitwise identical results on every rank (docs/protocol.md R4).
// * Registered memory is an argument: a Buffer names the RegisteredMemory it lies in
//   (Buffer::registered, from allocate_registered below) and a backend uses what it knows
//   of that memory (the UCX backend: zero-copy through the peers' mappings of a
//   SharedBuffer). Nothing is looked up by address. Whether every rank's buffer is
//   registered is agreed inside the collective, so mixing is correct, only slower.
// * Every backend implements the seams the recovery protocol and its tests rely on:
//   abort_failed() (D4 self-fencing: peers fail naming this rank), inject_drop() (a test
//   seam: this rank's connections drop as if the network cut them) and the chunk hook
//   (CommOptions::on_chunk, comm/types.h ChunkEvent), called as every all-reduce
//   progresses.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/enum_names.h"
#include "comm/bootstrap/bootstrap_store.h"
#include "comm/tag.h"
#include "comm/types.h"

namespace rf::comm {

class Work {
 public:
  virtual ~Work() = default;
  // true once finished successfully; rethrows the collective's error if it failed.
  virtual bool test() = 0;
  // Blocks until finished or `deadline`. Throws the collective's error, or TimedOut if the
  // deadline passed first (the collective keeps running; the stall timeout still applies).
  virtual void wait(TimePoint deadline) = 0;
  void wait() { wait(TimePoint::max()); }
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual uint64_t generation() const = 0;

  // Sum in place over all ranks.
  virtual WorkPtr allreduce_start(Buffer buf, OpId id, Stream stream = nullptr) = 0;
  // root's buffer to everyone's.
  virtual WorkPtr broadcast_start(Buffer buf, int root, OpId id, Stream stream = nullptr) = 0;
  // out (W x in.count elements) receives every rank's `in`, in rank order.
  virtual WorkPtr allgather_start(Buffer in, Buffer out, OpId id, Stream stream = nullptr) = 0;
  virtual WorkPtr barrier_start(OpId id) = 0;
  // Point-to-point byte blobs (state transfer). The receiver must name the exact size.
  virtual WorkPtr send_start(int peer, const void* data, size_t bytes, OpId id) = 0;
  virtual WorkPtr recv_start(int peer, void* data, size_t bytes, OpId id) = 0;

  // Blocking forms. A backend may override them with a faster path than start + wait.
  virtual void allreduce(Buffer buf, OpId id) { allreduce_start(buf, id)->wait(); }
  virtual void broadcast(Buffer buf, int root, OpId id) { broadcast_start(buf, root, id)->wait(); }
  virtual void allgather(Buffer in, Buffer out, OpId id) { allgather_start(in, out, id)->wait(); }
  virtual void barrier(OpId id) { barrier_start(id)->wait(); }
  virtual void send(int peer, const void* data, size_t bytes, OpId id) { send_start(peer, data, bytes, id)->wait(); }
  virtual void recv(int peer, void* data, size_t bytes, OpId id) { recv_start(peer, data, bytes, id)->wait(); }

  // Callable from any thread (e.g. the elastic client's heartbeat thread). Only sets a
  // flag: every pending and future operation then fails within 10 ms with Aborted naming
  // the generation and `reason`.
  virtual void abort(const std::string& reason) = 0;
  // Like abort(), but peers are told that THIS rank failed, so they fail with PeerFailed
  // naming it and report it: for a rank that cuts itself off (D4 self-fencing, which the
  // coordinator has not revoked yet). Locally: Aborted(reason). Callable from any thread,
  // the chunk hook's included.
  virtual void abort_failed(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
  // Test seam (fault injection): this rank's connections drop as if the network had cut
  // them. Only sets a flag (callable from any thread, the chunk hook's included); the
  // pending collectives of every rank then fail with PeerFailed naming this rank.
  virtual void inject_drop() = 0;
  // D3: a collective that makes no progress this long fails with TimedOut. Callable from
  // any thread at any time (the trainer sets the bound it learned from its step times,
  // ddp/stall_bound.h); it applies to the next check of every pending collective.
  virtual void set_stall_timeout(Duration timeout) = 0;
  virtual Duration stall_timeout() const = 0;
  // Whether the next generation may be formed from this communicator (CommRegroup::shrink):
  // the NCCL backend's, while its NCCL communicator was revoked rather than aborted. A
  // worker reports it for the next round (elastic::StateReport::comm_generation).
  virtual bool can_regroup() const { return false; }
};

// ---- making one ------------------------------------------------------------------------

enum class Backend { Ucx, Nccl };
inline constexpr EnumName<Backend> kBackendNames[] = {{Backend::Ucx, "ucx"}, {Backend::Nccl, "nccl"}};
static_assert(lists_each_once(kBackendNames));
const char* backend_name(Backend b);  // "ucx", "nccl"
// "ucx" or "nccl"; anything else throws rf::InvalidInput naming the text and the choices.
Backend parse_backend(std::string_view text);

// How this generation's communicator is formed, as the coordinator's plan says (every rank
// of the generation gets the same): afresh, or by shrinking generation `from_generation`'s
// (NCCL: ncclCommShrink; only when every rank of the plan held that communicator and only
// ranks left, elastic/plan.h). The UCX backend forms every generation afresh and ignores it.
struct CommRegroup {
  enum class Kind : uint8_t { fresh, shrink };
  Kind kind = Kind::fresh;
  uint64_t from_generation = 0;  // shrink only
};

// What every backend needs to form the communicator of one generation.
struct CommOptions {
  // Where ranks publish and find each other's addresses (keys scoped by the generation).
  // Used only while make_communicator runs. Required.
  BootstrapStore* store = nullptr;
  int rank = 0;
  int world = 1;
  uint64_t generation = 0;
  std::chrono::milliseconds stall_timeout{30000};    // D3 at first; set_stall_timeout() changes it
  std::chrono::milliseconds connect_timeout{30000};  // waiting for the peers' addresses
  std::string flight_recorder_path;                  // JSON lines appended here on failure; "" = stderr
  // The chunk hook (comm/types.h): called on the driving thread as every all-reduce
  // progresses; it may call abort(), abort_failed() and inject_drop().
  ChunkCallback on_chunk;
  // Where the collectives' buffers live. Device::cuda with Backend::Nccl: the GPU the NCCL
  // communicator is bound to; with Backend::Ucx: the GPU whose buffers are staged through
  // pinned host memory (host buffers still go straight to UCX).
  Device device = Device::host;
  int device_index = 0;
  // Each rank's member identity in rank order (the trainer passes slot and incarnation, so
  // a restarted worker is a new member), and the previous generation's communicator, which
  // the NCCL backend shrinks when `regroup` says so (comm/nccl/regroup.h maps the ranks)
  // and otherwise tears down. Other backends ignore both.
  std::vector<std::string> members;
  std::shared_ptr<Communicator> previous;
  // Shrink or fresh (the plan's word, above). shrink needs `previous` of that generation
  // with can_regroup(), and `members` that are its members with some removed in the same
  // order; otherwise make_communicator throws PeerFailed ("bootstrap") saying which.
  CommRegroup regroup;
  // NCCL: fix the summation order (ring, Simple protocol, fixed channels, NVLS and CollNet
  // off; comm/nccl/determinism.h), so a replaced or shrunk generation sums as the run that
  // never failed. Applied by the first NCCL communicator a process makes.
  bool nccl_deterministic = true;
  // The generation's tag key (comm/tag.h): the UCX backend sends every message under it, so
  // a connection from outside the job delivers nothing. The trainer derives it from the job
  // token (elastic/auth.h data_plane_key); disabled without one. NCCL's messages carry no
  // tags: its communicator is formed from the generation's ncclUniqueId, which only the
  // job's authenticated store hands out.
  TagKey tag_key;
};

// Connects to the other ranks of options.generation (publishes this rank's address, waits
// for theirs up to connect_timeout) and returns the communicator. Throws rf::InvalidInput
// for bad options or a backend this build or program does not have (Nccl, or a device
// buffer's staging, without register_cuda_comm()), comm errors
// (TimedOut, PeerFailed) when connecting fails. The UCX backend's process-wide state (its
// UCP context) is made once, by the first call or by prepare_backend, whichever is first.
std::shared_ptr<Communicator> make_communicator(Backend backend, const CommOptions& options);
// Makes the backend's process-wide state now, so that the first make_communicator does not
// pay for it (a trainer calls it at start-up). Thread-safe; a no-op after the first call.
void prepare_backend(Backend backend);

// Memory for large all-reduces (gradient buckets), zero-filled and resident: pass it as the
// Buffers' `registered` (comm/types.h). Host: a SharedBuffer (comm/shm/shared_buffer.h), which
// the UCX backend all-reduces zero-copy; device memory (Device::cuda) comes from the CUDA
// halves (register_cuda_comm(); without them rf::InvalidInput says so). Belongs to no
// communicator.
std::shared_ptr<RegisteredMemory> allocate_registered(size_t bytes, Device device = Device::host, int index = 0);

}  // namespace rf::comm
