// comm_seam_test — the comm seam on real processes: communicators made by
// make_communicator (comm/communicator.h), buffers registered explicitly, and the seams
// every backend implements. Ranks are started and reaped by run_local_ranks with a
// deadline, a FileStore in a fresh temporary directory (as comm_mp_test).
//
//   comm_seam_test <scenario> <W>     the launcher: starts W ranks, checks how each ended
//
// registration: an all-reduce on a range of registered memory that does not name it takes
//   the ring; naming it, the zero-copy path; a rank that does not name it makes all take
//   the ring; a buffer naming memory it is not inside is refused on every rank, which
//   poisons nothing.
// hooks: the chunk hook fires with this generation, step and growing counts (ring and
//   zero-copy); inject_drop() from the hook makes every rank fail with PeerFailed naming
//   the dropped rank; abort_failed() makes the others fail with PeerFailed naming the
//   aborting rank and its reason, the aborting rank with Aborted.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/communicator.h"
#include "tests/comm/mp_check.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/ucx/ucx_communicator.h"  // the path counters of the UCX backend

using namespace rf::comm;

namespace {

using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

struct Env {
  RankEnv re;
  std::unique_ptr<FileStore> store;
};

Env make_env() {
  Env e;
  e.re = rank_env_from_environment();
  g_rank = e.re.rank;
  e.store = std::make_unique<FileStore>(e.re.store_dir);
  return e;
}

CommOptions options(Env& e, uint64_t generation) {
  CommOptions o;
  o.store = e.store.get();
  o.rank = e.re.rank;
  o.world = e.re.world;
  o.generation = generation;
  o.flight_recorder_path = rf::str(e.re.store_dir, "/flight.", e.re.rank);
  return o;
}

// Registered memory of a device this build cannot register (what a GPU allocation is).
class FakeDeviceMemory final : public RegisteredMemory {
 public:
  FakeDeviceMemory(void* p, size_t n) : p_(p), n_(n) {}
  void* data() const override { return p_; }
  size_t bytes() const override { return n_; }
  Device device() const override { return Device::cuda; }
  int device_index() const override { return 3; }

 private:
  void* p_;
  size_t n_;
};

// What the call throws: rf::InvalidInput's text, or a note that it threw none.
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const rf::InvalidInput& err) {
    return err.what();
  }
  return "(accepted: no rf::InvalidInput)";
}

Buffer floats(float* p, size_t n, const RegisteredMemory* reg) {
  Buffer b{p, n, DType::f32};
  b.registered = reg;
  return b;
}

// Every rank fills [p, p+n) with rank + 1; the sum is W(W+1)/2 everywhere.
void fill_and_check(Communicator& c, float* p, size_t n, const RegisteredMemory* reg, uint64_t step) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(c.rank() + 1);
  c.allreduce(floats(p, n, reg), OpId{step, 0});
  const float want = static_cast<float>(c.world_size() * (c.world_size() + 1) / 2);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += p[i] != want;
  EXPECT(bad == 0, "step ", step, ": ", bad, " of ", n, " elements are not ", want);
}

int scenario_registration() {
  Env e = make_env();
  std::shared_ptr<Communicator> c = make_communicator(Backend::Ucx, options(e, 1));
  auto* ucx = dynamic_cast<UcxCommunicator*>(c.get());
  EXPECT(ucx != nullptr, "make_communicator(Ucx) did not make a UcxCommunicator");
  if (!ucx) return 1;
  const bool multi = c->world_size() > 1;
  EXPECT(ucx->shm_path() == multi, "shared-memory path ", ucx->shm_path());
  const size_t n = size_t{1} << 16;  // 256 KiB: far above the slots, so the ring or zero-copy
  auto mem = allocate_registered((n + 4096) * sizeof(float));
  float* base = static_cast<float*>(mem->data());
  float* view = base + 1000;  // a range inside, at an offset

  // 1. The same range, not named: plain memory, the ring (no lookup finds it).
  fill_and_check(*c, view, n, nullptr, 1);
  EXPECT(ucx->zero_copy_allreduces() == 0, ucx->zero_copy_allreduces(), " zero-copy all-reduces on an unnamed range");
  // 2. Named: zero-copy (with peers on this host).
  fill_and_check(*c, view, n, mem.get(), 2);
  EXPECT(ucx->zero_copy_allreduces() == (multi ? 1u : 0u), ucx->zero_copy_allreduces(), " zero-copy all-reduces");
  // 3. Only rank 0 does not name it: every rank agrees on the ring.
  fill_and_check(*c, view, n, c->rank() == 0 ? nullptr : mem.get(), 3);
  EXPECT(ucx->zero_copy_allreduces() == (multi ? 1u : 0u), "rank 0 unregistered, yet zero-copy");
  // 4. A buffer naming memory it is not inside, or memory of another device: refused, on
  //    every rank alike, before anything starts; the communicator goes on.
  auto other = allocate_registered(n * sizeof(float));
  const Buffer elsewhere = floats(view, n, other.get());
  const Buffer past_end = floats(base + 4096, n + 1, mem.get());  // one float beyond the end
  for (const Buffer& b : {elsewhere, past_end}) {
    std::string why = refusal([&] { c->allreduce_start(b, OpId{4, 0}); });
    EXPECT(why.find("all-reduce: buffer") != std::string::npos && why.find("not inside the registered memory") != std::string::npos, why);
    why = refusal([&] { c->allreduce(b, OpId{4, 0}); });
    EXPECT(why.find("not inside the registered memory") != std::string::npos, why);
  }
  std::string why = refusal([&] { c->broadcast(elsewhere, 0, OpId{4, 1}); });
  EXPECT(why.find("broadcast: buffer") != std::string::npos, why);
  FakeDeviceMemory device_memory(base, mem->bytes());
  why = refusal([&] { c->allreduce(floats(view, n, &device_memory), OpId{4, 2}); });
  EXPECT(why.find("cuda:3") != std::string::npos, why);
  EXPECT(!c->aborted(), "a refused buffer aborted the communicator");
  fill_and_check(*c, view, n, mem.get(), 5);
  EXPECT(ucx->zero_copy_allreduces() == (multi ? 2u : 0u), ucx->zero_copy_allreduces(), " zero-copy all-reduces");
  c->barrier(OpId{6, 0});  // nobody leaves while others still read its buffer
  return g_failures ? 1 : 0;
}

// One generation whose rank `actor` runs `act` from the chunk hook at chunk 2 of step 5's
// all-reduce (16 MiB, the ring); `check` judges the error each rank got.
template <typename Act>
void hooked_generation(Env& e, uint64_t g, int actor, Act act, const std::function<void(const std::exception&)>& check) {
  CommOptions o = options(e, g);
  o.stall_timeout = std::chrono::milliseconds(2000);
  std::atomic<Communicator*> self{nullptr};
  if (e.re.rank == actor) {
    o.on_chunk = [&](const ChunkEvent& ev) {
      if (ev.step == 5 && ev.chunks_done == 2 && self.load()) act(*self.load());
    };
  }
  std::shared_ptr<Communicator> c = make_communicator(Backend::Ucx, o);
  self.store(c.get());
  std::vector<float> big(size_t{4} << 20, 1.0f);
  const rf::TimePoint t = rf::Clock::now();
  try {
    c->allreduce(floats(big.data(), big.size(), nullptr), OpId{5, 0});
    EXPECT(false, "generation ", g, ": the all-reduce finished although rank ", actor, " acted");
  } catch (const CommError& err) {
    check(err);
    const double ms = std::chrono::duration<double, std::milli>(rf::Clock::now() - t).count();
    EXPECT(ms < 2000, "generation ", g, ": failing took ", ms, " ms: ", err.what());
    std::cerr << "rank " << e.re.rank << " generation " << g << ": " << err.what() << "\n";
  }
}

int scenario_hooks() {
  Env e = make_env();
  const int r = e.re.rank;
  // Generation 1: the hook fires for the ring and for zero-copy, with growing counts.
  {
    CommOptions o = options(e, 1);
    std::mutex mu;  // the hook runs on whichever thread drives
    std::vector<ChunkEvent> events;
    o.on_chunk = [&](const ChunkEvent& ev) {
      std::lock_guard lk(mu);
      events.push_back(ev);
    };
    std::shared_ptr<Communicator> c = make_communicator(Backend::Ucx, o);
    std::vector<float> plain(size_t{1} << 18);
    fill_and_check(*c, plain.data(), plain.size(), nullptr, 1);
    auto mem = allocate_registered((size_t{1} << 18) * sizeof(float));
    fill_and_check(*c, static_cast<float*>(mem->data()), size_t{1} << 18, mem.get(), 2);
    c->barrier(OpId{3, 0});
    std::lock_guard lk(mu);
    for (uint64_t step : {1u, 2u}) {
      uint64_t last = 0, seen = 0;
      bool ordered = true;
      for (const ChunkEvent& ev : events) {
        if (ev.step != step) continue;
        EXPECT(ev.generation == 1 && ev.op == 0, "event of generation ", ev.generation, " op ", ev.op);
        ordered = ordered && ev.chunks_done == last + 1;
        last = ev.chunks_done;
        ++seen;
      }
      EXPECT(seen > 0 || e.re.world == 1, "no chunk event for the all-reduce of step ", step);
      EXPECT(ordered, "step ", step, ": chunk counts do not grow by one");
    }
  }
  if (e.re.world < 3) return g_failures ? 1 : 0;
  // Generation 2: rank 1 drops its connections from the hook; everyone fails naming it.
  hooked_generation(e, 2, 1, [](Communicator& c) { c.inject_drop(); }, [&](const std::exception& x) {
    const auto* pf = dynamic_cast<const PeerFailed*>(&x);
    EXPECT(pf != nullptr && pf->peer() == 1, "expected PeerFailed naming rank 1: ", x.what());
  });
  // Generation 3: rank 0 fences itself from the hook; the others fail naming it and why.
  hooked_generation(e, 3, 0, [](Communicator& c) { c.abort_failed("test: rank 0 fences itself"); },
                    [&](const std::exception& x) {
    const std::string what = x.what();
    if (r == 0) {
      EXPECT(dynamic_cast<const Aborted*>(&x) != nullptr && what.find("fences itself") != std::string::npos,
             "rank 0 expected Aborted with its reason: ", what);
    } else {
      const auto* pf = dynamic_cast<const PeerFailed*>(&x);
      EXPECT(pf != nullptr && pf->peer() == 0 && what.find("rank 0 aborted: test: rank 0 fences itself") != std::string::npos,
             "expected PeerFailed naming rank 0 and its reason: ", what);
    }
  });
  return g_failures ? 1 : 0;
}

int run_rank(const std::string& scenario) {
  return rf::comm::testing::run_scenario(scenario, {{"registration", scenario_registration}, {"hooks", scenario_hooks}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: comm_seam_test <scenario> <W>\n";
    return 2;
  }
  if (std::getenv("RF_RANK")) return run_rank(argv[1]);
  const LocalLaunch l = rf::comm::testing::self_launch({argv[1], argv[2]}, std::atoi(argv[2]), std::chrono::seconds(60));
  const int rc = rf::comm::testing::run_and_report(l, [](int) { return ""; });
  std::cerr << "comm_seam_test " << argv[1] << " W=" << l.world << ": " << (rc ? "FAILED" : "passed") << "\n";
  return rc;
}
