// The NCCL backend's own code (comm/nccl/) at W = 2-4 processes on the CPU, over the test
// double of NCCL's non-blocking API and the CUDA runtime (tests/nccl_double): each
// scenario is a use of the API that NCCL 2.28 documents, and each checks one defect found
// by reading NCCL's source (docs/gpu.md, "Testing without a GPU"). It checks our use of
// the API, not NCCL: the GPU run (scripts/gpu-check) is the truth.
//
//   nccl_double_mp_test SCENARIO W      (the parent launches W ranks of itself)
//
// Fake device r is rank r's GPU. Every rank checks at the end that it made a CUDA context
// on its own device only.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "base/clock.h"
#include "base/str.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/nccl/nccl_communicator.h"
#include "tests/comm/mp_check.h"
#include "tests/nccl_double/fake_hooks.h"

using namespace rf::comm;
using namespace std::chrono_literals;
using rf::Clock;
using rf::TimePoint;

namespace {

struct Rank {
  int rank = 0, world = 1;
  std::unique_ptr<FileStore> store;
  cudaStream_t stream = nullptr;
};

std::vector<std::string> members(int world, int skip = -1) {
  std::vector<std::string> m;
  for (int r = 0; r < world; ++r)
    if (r != skip) m.push_back(rf::str("m", r));
  return m;
}

std::shared_ptr<Communicator> make(Rank& me, uint64_t generation, int rank, int world, std::vector<std::string> m,
                                   std::chrono::milliseconds stall = 30s, std::shared_ptr<Communicator> previous = {},
                                   CommRegroup regroup = {}) {
  CommOptions o;
  o.store = me.store.get();
  o.rank = rank;
  o.world = world;
  o.generation = generation;
  o.stall_timeout = stall;
  o.connect_timeout = 10s;
  o.device = Device::cuda;
  o.device_index = me.rank;
  o.members = std::move(m);
  o.previous = std::move(previous);
  o.regroup = regroup;
  return nccl::make_nccl_communicator(o);
}

// A device buffer of n floats (fake device memory is host memory).
struct DeviceFloats {
  float* p = nullptr;
  size_t n = 0;
  explicit DeviceFloats(size_t count) : n(count) {
    EXPECT(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess, "cudaMalloc of ", n, " floats");
  }
  ~DeviceFloats() { cudaFree(p); }
  Buffer buffer(int device) const { return Buffer{p, n, DType::f32, Device::cuda, device}; }
};

// Rank r contributes r + 1 + i / 7 at i: the sum over W ranks is exact in float.
void fill(DeviceFloats& x, int rank) {
  for (size_t i = 0; i < x.n; ++i) x.p[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 7);
}
bool summed(const DeviceFloats& x, const std::vector<int>& ranks) {
  for (size_t i = 0; i < x.n; ++i) {
    float want = 0;
    for (int r : ranks) want += static_cast<float>(r + 1) + static_cast<float>(i % 7);
    if (x.p[i] != want) return false;
  }
  return true;
}

void signal_key(Rank& me, const std::string& key) { me.store->set(key, {1}); }
void wait_key(Rank& me, const std::string& key, std::chrono::milliseconds t = 20s) { (void)me.store->wait_get(key, t); }

// ---- scenarios ---------------------------------------------------------------------------

// Several buckets outstanding at once on device buffers, host buffers through staging, and
// every other collective. Every NCCL call answers ncclInProgress (a launch job); with
// RF_FAKE_NCCL_INPROGRESS_MS set (`inprogress`), each launch also takes that long.
void allreduce(Rank& me) {
  auto c = make(me, 1, me.rank, me.world, members(me.world));
  std::vector<std::unique_ptr<DeviceFloats>> buckets;
  std::vector<WorkPtr> work;
  for (int b = 0; b < 6; ++b) {
    buckets.push_back(std::make_unique<DeviceFloats>(1000 + 4096 * b));
    fill(*buckets.back(), me.rank);
    work.push_back(c->allreduce_start(buckets.back()->buffer(me.rank), OpId{7, static_cast<uint32_t>(b)}, me.stream));
  }
  std::vector<int> all(me.world);
  for (int r = 0; r < me.world; ++r) all[r] = r;
  for (int b = 0; b < 6; ++b) {
    work[b]->wait(Clock::now() + 20s);
    EXPECT(summed(*buckets[b], all), "bucket ", b, " is not the exact sum over ", me.world, " ranks");
  }
  std::vector<double> h(333, static_cast<double>(me.rank + 1));
  c->allreduce(Buffer{h.data(), h.size(), DType::f64}, OpId{8, 0});
  EXPECT(h[332] == me.world * (me.world + 1) / 2.0, "host all-reduce: ", h[332]);
  std::vector<uint64_t> in{uint64_t(me.rank), uint64_t(me.rank * 10)}, out(2 * me.world, 99);
  c->allgather(Buffer{in.data(), 2, DType::u64}, Buffer{out.data(), out.size(), DType::u64}, OpId{8, 1});
  for (int r = 0; r < me.world; ++r) EXPECT(out[2 * r] == uint64_t(r) && out[2 * r + 1] == uint64_t(10 * r), "all-gather slot ", r);
  std::vector<float> root(5, me.rank == 0 ? 42.0f : 0.0f);
  c->broadcast(Buffer{root.data(), 5, DType::f32}, 0, OpId{8, 2});
  EXPECT(root[4] == 42.0f, "broadcast: ", root[4]);
  c->barrier(OpId{8, 3});
  // Point to point as the state transfer uses it: one way, a source to a receiver (NCCL
  // needs a group for a send and a receive that must progress together).
  char blob[16] = {};
  if (me.rank == 0) {
    std::snprintf(blob, sizeof blob, "state of 0");
    c->send(1, blob, sizeof blob, OpId{9, 0});
  } else if (me.rank == 1) {
    c->recv(0, blob, sizeof blob, OpId{9, 0});
    EXPECT(std::string(blob) == "state of 0", blob);
  }
  c->barrier(OpId{9, 1});
}

// The caller's stream does not wait for an all-reduce it started: work enqueued behind it
// (the rest of backward) runs while the all-reduce waits for a late peer.
void overlap(Rank& me) {
  auto c = make(me, 1, me.rank, me.world, members(me.world));
  DeviceFloats x(4096);
  fill(x, me.rank);
  if (me.rank == 0) {
    WorkPtr w = c->allreduce_start(x.buffer(me.rank), OpId{1, 0}, me.stream);
    cudaEvent_t behind;
    cudaEventCreate(&behind);
    cudaEventRecord(behind, me.stream);  // "a backward kernel after bucket 0"
    const TimePoint until = Clock::now() + 3s;
    bool ran = false;
    while (!(ran = cudaEventQuery(behind) == cudaSuccess) && Clock::now() < until) std::this_thread::sleep_for(1ms);
    EXPECT(ran, "work behind the all-reduce on the caller's stream waited for it (no overlap)");
    EXPECT(!w->test(), "the all-reduce finished before the late peer joined");
    signal_key(me, "go");  // only now does rank 1 start its all-reduce
    w->wait(Clock::now() + 20s);
    cudaEventDestroy(behind);
  } else {
    wait_key(me, "go");
    c->allreduce(x.buffer(me.rank), OpId{1, 0});
  }
  std::vector<int> all(me.world);
  for (int r = 0; r < me.world; ++r) all[r] = r;
  EXPECT(summed(x, all), "the sum after the late peer joined");
}

// The last rank never calls the all-reduce: the others revoke at their stall deadline with
// TimedOut (they started; nobody's GPU is stuck), never a false "done".
void never_calls(Rank& me) {
  auto c = make(me, 1, me.rank, me.world, members(me.world), 400ms);
  DeviceFloats x(1024);
  fill(x, me.rank);
  if (me.rank == me.world - 1) {
    for (int r = 0; r < me.world - 1; ++r) wait_key(me, rf::str("done", r));
    return;
  }
  const TimePoint t0 = Clock::now();
  try {
    c->allreduce(x.buffer(me.rank), OpId{3, 0});
    EXPECT(false, "an all-reduce a peer never joined completed");
  } catch (const TimedOut& e) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT(s >= 0.39 && s < 1.5, "failed after ", s, " s, stall bound 0.4 s");
    EXPECT(!e.info().device_stuck, e.what());
  }
  signal_key(me, rf::str("done", me.rank));
}

// The last rank dies (SIGKILL) inside the all-reduce: NCCL's async error fails the others
// at once (PeerFailed), long before the stall bound.
void kill(Rank& me) {
  auto c = make(me, 1, me.rank, me.world, members(me.world));
  DeviceFloats x(1 << 16);
  fill(x, me.rank);
  if (me.rank == me.world - 1) {
    for (int r = 0; r < me.world - 1; ++r) wait_key(me, rf::str("started", r));
    raise(SIGKILL);
  }
  WorkPtr w = c->allreduce_start(x.buffer(me.rank), OpId{4, 0}, me.stream);
  signal_key(me, rf::str("started", me.rank));
  const TimePoint t0 = Clock::now();
  try {
    w->wait(Clock::now() + 25s);
    EXPECT(false, "an all-reduce with a dead peer completed");
  } catch (const PeerFailed& e) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT(s < 5.0, "the peer's death was seen after ", s, " s: ", e.what());
  } catch (const CommError& e) {
    EXPECT(false, "expected PeerFailed, got ", e.what());
  }
}

// Rank 1's compute stream is stuck (a kernel that never ends) when it starts the
// all-reduce: it names itself (device_stuck) at its stall deadline; rank 0 times out. Its
// teardown (ncclCommAbort waits behind the stuck kernel) is bounded: rank 1 exits with
// status 75 within 2 s, for its launcher to restart it.
void stuck(Rank& me) {
  auto c = make(me, 1, me.rank, me.world, members(me.world), me.rank == 1 ? 500ms : 800ms);
  DeviceFloats x(1024);
  fill(x, me.rank);
  if (me.rank == 1) rf_fake_cuda_spin(me.stream);
  try {
    c->allreduce_start(x.buffer(me.rank), OpId{5, 0}, me.stream)->wait(Clock::now() + 20s);
    EXPECT(false, "completed");
  } catch (const CommError& e) {
    if (me.rank == 1) {
      EXPECT(e.info().device_stuck && dynamic_cast<const PeerFailed*>(&e), "not device_stuck: ", e.what());
      EXPECT(e.info().peer == 1, e.what());
    } else {
      EXPECT(!e.info().device_stuck && dynamic_cast<const TimedOut*>(&e), e.what());
    }
  }
  if (me.rank == 1) {
    // The teardown below ends the process: what failed so far must end it first.
    if (testing::g_failures != 0) std::_Exit(1);
    const TimePoint t0 = Clock::now();
    std::fprintf(stderr, "rank 1: tearing down behind its stuck kernel\n");
    c.reset();  // exits the process (status 75) after 2 s
    EXPECT(false, "teardown behind a stuck kernel returned after ",
           std::chrono::duration<double>(Clock::now() - t0).count(), " s");
  }
}

// The coordinator revokes first (abort()): rank 1, whose GPU has not reached the operation
// for over half its stall bound, still says device_stuck on its Aborted error.
void stuck_aborted(Rank& me) {
  auto c = make(me, 1, me.rank, me.world, members(me.world), me.rank == 1 ? 1000ms : 30000ms);
  DeviceFloats x(1024);
  fill(x, me.rank);
  if (me.rank == 1) rf_fake_cuda_spin(me.stream);
  WorkPtr w = c->allreduce_start(x.buffer(me.rank), OpId{5, 0}, me.stream);
  if (me.rank == 0) {
    std::this_thread::sleep_for(600ms);  // the time a peer's stall bound takes (the point of the case)
    signal_key(me, "revoke");
  } else {
    wait_key(me, "revoke");
  }
  c->abort("the coordinator revoked g=1");
  try {
    w->wait(Clock::now() + 5s);
    EXPECT(false, "completed");
  } catch (const Aborted& e) {
    EXPECT(e.info().device_stuck == (me.rank == 1), e.what());
  }
  rf_fake_cuda_release_spins();  // so that this rank's teardown can end
  cudaStreamSynchronize(me.stream);
}

// Generation 2 of the survivors (every rank but the last), formed as `plan` says from
// `previous` (null: a fresh init), sums: their contributions only.
void second_generation(Rank& me, DeviceFloats& x, std::shared_ptr<Communicator> previous, const CommRegroup& plan) {
  const int last = me.world - 1;
  auto g2 = make(me, 2, me.rank, me.world - 1, members(me.world, last), 2s, std::move(previous), plan);
  fill(x, me.rank);
  g2->allreduce(x.buffer(me.rank), OpId{3, 0});
  std::vector<int> survivors;
  for (int r = 0; r < last; ++r) survivors.push_back(r);
  EXPECT(summed(x, survivors), "generation 2's sum");
}

// Generation 1 of W ranks; the last leaves as an evicted rank does: it stops calling (a
// stopped or hung process), the survivors' all-reduce stalls and they revoke, and only then
// does it exit, its sockets closing while none of their kernels waits on it. Their revoked
// communicators settle without an error, so they can be shrunk. Generation 2 as the plan
// says: `shrink` (ncclCommShrink of g1, child handle NULL until done) or `fresh`.
// `disagree`: rank 1 lost its communicator (aborted) while rank 0 kept its one: the plan
// says fresh and both obey (deciding locally, rank 0 would shrink and rank 1 wait for a
// unique id: both time out).
void regroup(Rank& me, const std::string& how) {
  auto g1 = make(me, 1, me.rank, me.world, members(me.world), 400ms);
  DeviceFloats x(4096);
  fill(x, me.rank);
  g1->allreduce(x.buffer(me.rank), OpId{1, 0});
  const int last = me.world - 1;
  if (me.rank == last) {
    for (int r = 0; r < last; ++r) wait_key(me, rf::str("revoked", r));
    return;  // exits: its sockets close now
  }
  try {
    g1->allreduce(x.buffer(me.rank), OpId{2, 0});
    EXPECT(false, "an all-reduce without the last rank completed");
  } catch (const TimedOut&) {
  } catch (const CommError& e) {
    EXPECT(false, "expected TimedOut (the stall bound), got ", e.what());
  }
  signal_key(me, rf::str("revoked", me.rank));
  EXPECT(g1->can_regroup(), "a revoked communicator that settled without an error can be shrunk");
  CommRegroup plan;
  if (how == "shrink") plan = CommRegroup{CommRegroup::Kind::shrink, 1};
  std::shared_ptr<Communicator> previous = g1;
  if (how == "disagree" && me.rank == 1) previous.reset();
  g1.reset();
  second_generation(me, x, std::move(previous), plan);
}

// The last rank dies (SIGKILL) inside the all-reduce: its sockets close while the
// survivors' kernels wait on it, and NCCL's proxy keeps ncclRemoteError through
// ncclCommRevoke (NCCL 2.28.9). So the revoked communicator is not shrinkable:
// can_regroup() is false, each worker's report says comm_generation 0, and the
// coordinator's plan is a fresh init (elastic/plan.h, decide_shrink_from), which works.
void death(Rank& me) {
  auto g1 = make(me, 1, me.rank, me.world, members(me.world), 2s);
  DeviceFloats x(1 << 14);
  fill(x, me.rank);
  g1->allreduce(x.buffer(me.rank), OpId{1, 0});
  const int last = me.world - 1;
  if (me.rank == last) {
    for (int r = 0; r < last; ++r) wait_key(me, rf::str("started", r));
    raise(SIGKILL);
  }
  WorkPtr w = g1->allreduce_start(x.buffer(me.rank), OpId{2, 0}, me.stream);
  signal_key(me, rf::str("started", me.rank));
  try {
    w->wait(Clock::now() + 20s);
    EXPECT(false, "an all-reduce with a dead peer completed");
  } catch (const PeerFailed&) {
  } catch (const CommError& e) {
    EXPECT(false, "expected PeerFailed, got ", e.what());
  }
  const bool can = g1->can_regroup();
  EXPECT(!can, "a communicator revoked after a peer's death offers itself for ncclCommShrink, which fails at once");
  CommRegroup plan;  // the coordinator's: shrink only when every rank reported it can
  if (can) plan = CommRegroup{CommRegroup::Kind::shrink, 1};
  second_generation(me, x, std::move(g1), plan);
}

// abort() (the coordinator's revoke) while an all-reduce is still launching: NCCL's
// ncclCommRevoke would free the launch job under it (the double aborts the process at the
// next call that touches it). Rank 0's launch takes 100 ms, within the bound: it settles,
// is revoked, and can be shrunk. Rank 1's takes 5 s: it is not revoked but left to
// ncclCommAbort, which cancels it (can_regroup false).
void revoke_launching(Rank& me) {
  DeviceFloats x(1024);  // freed after the communicator's teardown (cudaFree waits for its stream)
  fill(x, me.rank);
  auto c = make(me, 1, me.rank, me.world, members(me.world), 30s);
  setenv("RF_FAKE_NCCL_INPROGRESS_MS", me.rank == 0 ? "100" : "5000", 1);  // the double reads it at each call
  WorkPtr w = c->allreduce_start(x.buffer(me.rank), OpId{1, 0}, me.stream);
  c->abort("the coordinator revoked g=1");
  try {
    w->wait(Clock::now() + 10s);
    EXPECT(false, "completed");
  } catch (const Aborted&) {
  } catch (const CommError& e) {
    EXPECT(false, "expected Aborted, got ", e.what());
  }
  EXPECT(c->can_regroup() == (me.rank == 0), "rank ", me.rank, ": can_regroup() says ", c->can_regroup());
  // Rank 0 checks before rank 1's sockets close (they would not matter: its kernel ended).
  if (me.rank == 0) signal_key(me, "checked");
  else wait_key(me, "checked");
  unsetenv("RF_FAKE_NCCL_INPROGRESS_MS");
}

// A communicator whose connections take 1.5 s (RF_FAKE_NCCL_CONNECT_MS) under a 500 ms
// stall bound: the backend has NCCL connect at init (NCCL_RUNTIME_CONNECT=0), inside the
// connect timeout, so the first all-reduce completes; connecting inside it would stall it.
void runtime_connect(Rank& me) {
  DeviceFloats x(1024);  // freed after the communicator's teardown (cudaFree waits for its stream)
  fill(x, me.rank);
  auto c = make(me, 1, me.rank, me.world, members(me.world), 500ms);
  const char* v = std::getenv("NCCL_RUNTIME_CONNECT");
  EXPECT(v != nullptr && std::string(v) == "0", "NCCL_RUNTIME_CONNECT is ", v ? v : "unset", ", want 0");
  c->allreduce(x.buffer(me.rank), OpId{1, 0});
  std::vector<int> all(me.world);
  for (int r = 0; r < me.world; ++r) all[r] = r;
  EXPECT(summed(x, all), "the first all-reduce's sum");
}

// Ten generations, each revoked with a host all-reduce in flight (its staging slot under
// a revoked copy): the slots return to the pool, so device memory stays flat.
void generations(Rank& me) {
  std::shared_ptr<Communicator> previous;
  size_t first = 0;
  std::vector<float> host(1 << 18, 1.0f);  // 1 MiB: a slot of its own
  for (uint64_t g = 1; g <= 10; ++g) {
    auto c = make(me, g, me.rank, me.world, members(me.world), 30s, std::move(previous));
    previous.reset();
    c->allreduce(Buffer{host.data(), host.size(), DType::f32}, OpId{g, 0});
    WorkPtr w;
    if (me.rank == 0) w = c->allreduce_start(Buffer{host.data(), host.size(), DType::f32}, OpId{g, 1});
    signal_key(me, rf::str("g", g, "r", me.rank));
    for (int r = 0; r < me.world; ++r) wait_key(me, rf::str("g", g, "r", r));
    c->abort("revoked for the next generation");
    if (w) {  // fails: Aborted, or PeerFailed when the peer tore its communicator down first
      bool failed = false;
      try {
        w->wait(Clock::now() + 5s);
      } catch (const CommError&) {
        failed = true;
      }
      EXPECT(failed, "an all-reduce the peer never joined completed in generation ", g);
    }
    previous = std::move(c);
    if (g == 1) first = rf_fake_cuda_live_bytes(me.rank);
  }
  previous.reset();
  std::this_thread::sleep_for(50ms);  // the last teardown's host function
  const size_t last = rf_fake_cuda_live_bytes(me.rank);
  EXPECT(last <= first + (2u << 20), "device memory grew from ", first, " to ", last, " bytes over 10 generations");
}

int run_rank(const std::string& scenario) {
  const RankEnv env = rank_env_from_environment();
  testing::g_rank = env.rank;
  Rank me;
  me.rank = env.rank;
  me.world = env.world;
  me.store = std::make_unique<FileStore>(env.store_dir);
  cudaSetDevice(me.rank);  // as the trainer does: this process's GPU
  cudaStreamCreateWithFlags(&me.stream, cudaStreamNonBlocking);
  try {
    if (scenario == "allreduce" || scenario == "inprogress") allreduce(me);
    else if (scenario == "overlap") overlap(me);
    else if (scenario == "never_calls") never_calls(me);
    else if (scenario == "kill") kill(me);
    else if (scenario == "stuck") stuck(me);
    else if (scenario == "stuck_aborted") stuck_aborted(me);
    else if (scenario == "shrink" || scenario == "fresh" || scenario == "disagree") regroup(me, scenario);
    else if (scenario == "death_no_shrink") death(me);
    else if (scenario == "revoke_launching") revoke_launching(me);
    else if (scenario == "runtime_connect") runtime_connect(me);
    else if (scenario == "generations") generations(me);
    else EXPECT(false, "unknown scenario ", scenario);
  } catch (const std::exception& e) {
    EXPECT(false, "threw: ", e.what());
  }
  const unsigned contexts = rf_fake_cuda_contexts();
  EXPECT(contexts == (1u << me.rank), "CUDA contexts on devices 0x", std::hex, contexts, std::dec, ", want only cuda:", me.rank);
  return testing::g_failures != 0;
}

// How each rank must end: 0, except the rank a scenario kills or exits on purpose.
bool ended_as_expected(const std::string& scenario, int world, const RankExit& x) {
  if ((scenario == "kill" || scenario == "death_no_shrink") && x.rank == world - 1)
    return WIFSIGNALED(x.status) && WTERMSIG(x.status) == SIGKILL;
  if (scenario == "stuck" && x.rank == 1) return WIFEXITED(x.status) && WEXITSTATUS(x.status) == 75;
  return x.ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: nccl_double_mp_test SCENARIO W\n");
    return 2;
  }
  const std::string scenario = argv[1];
  if (std::getenv("RF_RANK")) return run_rank(scenario);
  const int world = std::atoi(argv[2]);
  LocalLaunch l = testing::self_launch({scenario, argv[2]}, world, std::chrono::seconds(60));
  l.env.push_back({"RF_FAKE_CUDA_DEVICES", std::to_string(std::max(world, 2))});
  if (scenario == "inprogress") l.env.push_back({"RF_FAKE_NCCL_INPROGRESS_MS", "30"});
  if (scenario == "runtime_connect") l.env.push_back({"RF_FAKE_NCCL_CONNECT_MS", "1500"});
  int rc = 0;
  for (const RankExit& x : run_local_ranks(l)) {
    const bool ok = ended_as_expected(scenario, world, x);
    if (!ok) rc = 1;
    std::fprintf(stderr, "  %s %s\n", ok ? "ok  " : "FAIL", x.describe().c_str());
  }
  std::fprintf(stderr, "nccl_double_mp_test %s %d: %s\n", scenario.c_str(), world, rc ? "FAILED" : "passed");
  return rc;
}
