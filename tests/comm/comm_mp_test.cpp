// comm_mp_test — multi-process tests of the UCX communicator on loopback: real processes
// (not threads), started and reaped by run_local_ranks (comm/bootstrap/local_launcher.h) with a
// deadline, a FileStore in a fresh temporary directory.
//
//   comm_mp_test <scenario> <W>           the launcher: starts W ranks, checks how each ended
//   (ranks run the same binary with RF_RANK/RF_WORLD/RF_STORE set)
//
// Scenarios: allreduce, large, collectives, blob_size, abort, abort_failed, kill, stall, fence, drop,
// destroy, sc_abort, sc_release, sc_cap, sc_cap_async, regen, zc_refd(_same), slot_mismatch, tag_mismatch; `_reg`, `_halfreg`, `_noshm` select
// registered buffers (zero-copy), all but rank 0 registered, the shared-memory path off;
// `<scenario>_fifo` runs one with the
// single-copy path off, `<scenario>_mixed` with it off on rank 0 only.
// A rank reports a failed check on stderr and exits 1; the launcher fails if any rank
// ended other than expected (only `kill`'s victim is expected to die by SIGKILL).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/digest.h"
#include "base/str.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/shm/shared_buffer.h"
#include "comm/shm/shm_mappings.h"
#include "comm/shm/shm_session.h"
#include "comm/ucx/ucx_communicator.h"
#include "tests/comm/mp_check.h"

using namespace rf::comm;
using rf::TimePoint;

namespace {

using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

struct Env {
  RankEnv re;
  std::unique_ptr<FileStore> store;
  std::shared_ptr<UcxContext> ctx;
};

Env make_env() {
  Env e;
  e.re = rank_env_from_environment();
  g_rank = e.re.rank;
  e.store = std::make_unique<FileStore>(e.re.store_dir);
  e.ctx = UcxContext::create();
  return e;
}

// `<scenario>_fifo` runs the scenario with the single-copy path off (UCX's FIFOs only), so
// both paths stay tested; otherwise every pair of ranks here must take the single-copy path
// (same host, same uid: a failing probe is a test failure, with the probe's reason logged).
// `<scenario>_mixed`: only rank 0 has it off; every pair with rank 0 must then use the
// FIFOs both ways (the connect-time agreement), the others the single-copy path.
bool fifo_only() { return std::getenv("RF_TEST_FIFO") != nullptr; }
bool mixed() { return std::getenv("RF_TEST_MIXED") != nullptr; }
bool single_copy_on(int rank) { return !fifo_only() && !(mixed() && rank == 0); }
// `<scenario>_reg`: every rank's buffers are SharedBuffers (the zero-copy path);
// `_halfreg`: all but rank 0's (so every rank must agree on the ordinary algorithms);
// `_noshm`: the shared-memory path off (slots and zero-copy), the message paths only.
bool no_shm() { return std::getenv("RF_TEST_NOSHM") != nullptr; }
bool all_registered() { return std::getenv("RF_TEST_REG") != nullptr; }
bool registered(int rank) { return all_registered() || (std::getenv("RF_TEST_HALFREG") != nullptr && rank != 0); }

// A test buffer: a SharedBuffer (registered: every Buffer of it names it) or a vector, as
// the scenario's suffix says.
template <typename T>
struct TestBuf {
  using value_type = T;
  TestBuf(size_t n, T fill = T{}) : count(n) {
    if (registered(g_rank)) {
      shared = SharedBuffer(n * sizeof(T));
      p = shared.as<T>();
    } else {
      plain.resize(n);
      p = plain.data();
    }
    std::fill(p, p + n, fill);
  }
  T* data() { return p; }
  size_t size() const { return count; }
  T& operator[](size_t i) { return p[i]; }
  T* begin() { return p; }
  T* end() { return p + count; }
  T& back() { return p[count - 1]; }
  const RegisteredMemory* registration() const { return registered(g_rank) ? &shared : nullptr; }
  size_t count;
  SharedBuffer shared;
  std::vector<T> plain;
  T* p = nullptr;
};

// The first `count` elements of v as a Buffer, naming v's registration if it has one.
template <typename T>
const RegisteredMemory* registration_of(const std::vector<T>&) { return nullptr; }
template <typename T>
const RegisteredMemory* registration_of(const TestBuf<T>& b) { return b.registration(); }
template <typename V>
Buffer whole(V& v, size_t count, DType dt) {
  Buffer b{v.data(), count, dt};
  b.registered = registration_of(v);
  return b;
}

// Which all-reduce paths a communicator took, as the suffix says it must.
void check_paths(const UcxCommunicator& c, bool expect_zero_copy, bool expect_slots) {
  if (c.world_size() == 1) return;
  EXPECT(c.shm_path() == !no_shm(), "shared-memory path ", c.shm_path());
  if (no_shm()) return;
  if (expect_slots) EXPECT(c.slot_allreduces() > 0, "no all-reduce through the slots");
  if (all_registered() && expect_zero_copy) EXPECT(c.zero_copy_allreduces() > 0, "no zero-copy all-reduce");
  if (!all_registered()) EXPECT(c.zero_copy_allreduces() == 0, c.zero_copy_allreduces(), " zero-copy all-reduces");
}

UcxOptions base_options() {
  UcxOptions o;
  o.shm = !no_shm();
  o.single_copy = single_copy_on(g_rank);
  return o;
}

void check_single_copy(const UcxCommunicator& c, bool expect_reads) {
  for (int q = 0; q < c.world_size(); ++q) {
    if (q == c.rank()) continue;
    const bool want = single_copy_on(c.rank()) && single_copy_on(q);
    EXPECT(c.single_copy_from(q) == want, "single-copy from rank ", q, ": ", c.single_copy_from(q));
  }
  // Mixed: with W >= 3 rank r > 0 still has a neighbour with the path on, but its left
  // neighbour may be rank 0; only "no reads where none may happen" is certain.
  if (!single_copy_on(c.rank())) EXPECT(c.single_copy_reads() == 0, c.single_copy_reads(), " single-copy reads with the path off");
  else if (expect_reads && !mixed()) EXPECT(c.single_copy_reads() > 0, "no single-copy read although the path is on");
}

double elapsed_ms(TimePoint since) { return std::chrono::duration<double, std::milli>(rf::Clock::now() - since).count(); }

// ---- values and the reference sum, computed in double --------------------------------

// Correctly rounded IEEE operations only (no libm), so every evaluation gives the same bits;
// divisions by 3 and 7 make the values inexact, so sums really depend on their order.
double value(int rank, size_t i) {
  const int64_t h = static_cast<int64_t>((i * 2654435761u + static_cast<size_t>(rank) * 97u) % 2000001u) - 1000000;
  return static_cast<double>(h) / 3.0 / (1 + rank % 7);
}

template <typename T>
T typed_value(int rank, size_t i) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(value(rank, i));
  else return static_cast<T>((i * 2654435761u + static_cast<size_t>(rank) * 40503u) ^ (uint64_t{1} << 62));
}

template <typename V>
void check_allreduce(Communicator& c, V& buf, size_t count, DType dt, uint64_t step) {
  using T = typename V::value_type;
  const int W = c.world_size(), r = c.rank();
  for (size_t i = 0; i < count; ++i) buf[i] = typed_value<T>(r, i);
  c.allreduce(whole(buf, count, dt), OpId{step, 0});
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < count; ++i) {
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      double ref = 0, mag = 0;
      for (int q = 0; q < W; ++q) {
        ref += static_cast<double>(typed_value<T>(q, i));
        mag += std::fabs(static_cast<double>(typed_value<T>(q, i)));
      }
      const double tol = (std::is_same_v<T, float> ? 1e-6 : 1e-14) * (mag + 1) * W;
      ok = std::fabs(static_cast<double>(buf[i]) - ref) <= tol;
    } else {
      T ref = 0;
      for (int q = 0; q < W; ++q) ref = static_cast<T>(static_cast<uint64_t>(ref) + static_cast<uint64_t>(typed_value<T>(q, i)));
      ok = buf[i] == ref;
    }
    if (!ok && bad++ == 0) {
      first_bad = i;
      std::cerr.precision(17);
      std::cerr << "  element " << i << ": got " << static_cast<double>(buf[i]) << " own " << static_cast<double>(typed_value<T>(r, i)) << "\n";
    }
  }
  EXPECT(bad == 0, dtype_name(dt), " count ", count, ": ", bad, " wrong elements, first at ", first_bad);
  // R4: every rank holds bitwise identical bytes. All-gather the digests and compare.
  rf::StateDigest dg;
  dg.update(buf.data(), count * sizeof(T));
  auto v = dg.value();
  std::vector<uint64_t> all(2 * static_cast<size_t>(W));
  c.allgather(Buffer{v.data(), 2, DType::u64}, Buffer{all.data(), all.size(), DType::u64}, OpId{step, 1});
  for (int q = 0; q < W; ++q) {
    EXPECT(all[2 * q] == v[0] && all[2 * q + 1] == v[1], dtype_name(dt), " count ", count, ": rank ", q,
           " holds different bytes (R4)");
  }
}

int scenario_allreduce(bool large) {
  Env e = make_env();
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 3, base_options());
  const int W = e.re.world;
  std::vector<size_t> counts;
  if (!large) {
    counts = {0, 1, 2, 3, 5, 7, 8, 13, 31, 64, 127, 1000, 4099, 16411, 65537, 262147};
    if (W <= 4) counts.push_back((size_t{1} << 20) + 3);
  } else {
    // 64 MiB of float at W = 2 (and 16 MiB + a prime remainder), big only for small W.
    // 1M + 3 floats (4 MiB) stays under the single-copy size cap (8 MiB at W = 2 on a
    // 2-core machine), the others take the FIFOs there: both paths in one communicator.
    counts = {(size_t{1} << 20) + 3, (size_t{4} << 20) + 7, size_t{16} << 20};
  }
  size_t maxc = 0;
  for (size_t n : counts) maxc = std::max(maxc, n);
  TestBuf<float> f(maxc);
  TestBuf<double> d(maxc);
  TestBuf<int64_t> i64(maxc);
  TestBuf<uint64_t> u64(maxc);
  uint64_t step = 0;
  for (size_t n : counts) {
    check_allreduce(c, f, n, DType::f32, step++);
    if (!large || n < (size_t{8} << 20)) {
      check_allreduce(c, d, n, DType::f64, step++);
      check_allreduce(c, i64, n, DType::i64, step++);
      check_allreduce(c, u64, n, DType::u64, step++);
    }
  }
  // Several outstanding all-reduces (gradient buckets) complete in start order.
  std::vector<TestBuf<float>> buckets;
  for (int b = 0; b < 3; ++b) buckets.emplace_back(20011);
  std::vector<WorkPtr> work;
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (size_t i = 0; i < buckets[b].size(); ++i) buckets[b][i] = static_cast<float>(e.re.rank + 1) * static_cast<float>(b + 1);
    work.push_back(c.allreduce_start(whole(buckets[b], buckets[b].size(), DType::f32), OpId{step, static_cast<uint32_t>(b)}));
  }
  work[2]->wait();
  EXPECT(work[0]->test() && work[1]->test(), "earlier buckets finished before the last one");
  const float tri = static_cast<float>(W * (W + 1) / 2);
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT(buckets[b][0] == tri * static_cast<float>(b + 1) && buckets[b].back() == tri * static_cast<float>(b + 1),
           "bucket ", b, " got ", buckets[b][0]);
  }
  c.barrier(OpId{step + 1, 0});
  // Ring pieces of >= 32 KiB: at W > 1 the 1M+3 and 64 MiB cases read from the peers
  // (unless they went zero-copy).
  check_single_copy(c, W > 1 && (large || W <= 4) && !all_registered());
  check_paths(c, true, !large);
  return g_failures ? 1 : 0;
}

int scenario_collectives() {
  Env e = make_env();
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 5, base_options());
  const int W = e.re.world, r = e.re.rank;
  uint64_t step = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
    for (int root : {0, W - 1}) {
      std::vector<uint8_t> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = r == root ? static_cast<uint8_t>(i * 7 + root) : 0;
      c.broadcast(Buffer{b.data(), n / 8, DType::u64}, root, OpId{step++, 0});
      size_t bad = 0;
      for (size_t i = 0; i < n / 8 * 8; ++i) bad += b[i] != static_cast<uint8_t>(i * 7 + root);
      EXPECT(bad == 0, "broadcast of ", n, " bytes from ", root, ": ", bad, " wrong");
    }
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}}) {
    std::vector<double> in(n), out(n * W, -1);
    for (size_t i = 0; i < n; ++i) in[i] = r * 1e6 + static_cast<double>(i);
    c.allgather(Buffer{in.data(), n, DType::f64}, Buffer{out.data(), out.size(), DType::f64}, OpId{step++, 0});
    size_t bad = 0;
    for (int q = 0; q < W; ++q)
      for (size_t i = 0; i < n; ++i) bad += out[q * n + i] != q * 1e6 + static_cast<double>(i);
    EXPECT(bad == 0, "all-gather of ", n, ": ", bad, " wrong");
  }
  c.barrier(OpId{step++, 0});
  // Blobs round the ring (state transfer), 8 MiB each, with both directions in flight.
  const size_t blob = size_t{8} << 20;
  std::vector<uint8_t> out(blob), in(blob);
  for (size_t i = 0; i < blob; ++i) out[i] = static_cast<uint8_t>(i * 13 + r);
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  auto rw = c.recv_start(left, in.data(), blob, OpId{step, 2});
  auto sw = c.send_start(right, out.data(), blob, OpId{step, 2});
  rw->wait();
  sw->wait();
  size_t bad = 0;
  for (size_t i = 0; i < blob; ++i) bad += in[i] != static_cast<uint8_t>(i * 13 + left);
  EXPECT(bad == 0, "blob from ", left, ": ", bad, " wrong bytes");
  ++step;
  // Bad arguments are typed errors naming the problem.
  try {
    c.allreduce_start(Buffer{nullptr, 0, DType::f32}, OpId{step, 255});
    EXPECT(false, "op 255 accepted");
  } catch (const rf::InvalidInput& err) {
    EXPECT(std::string(err.what()).find("op 255") != std::string::npos, err.what());
  }
  c.barrier(OpId{step + 1, 0});  // nobody leaves while others still talk to it
  check_single_copy(c, true);  // 3 MiB broadcasts in pieces of chunk_bytes
  return g_failures ? 1 : 0;
}

// A blob of the wrong size is an error that says so (and poisons that communicator, so it
// gets one of its own).
int scenario_blob_size() {
  Env e = make_env();
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 6);
  const int r = e.re.rank;
  const uint64_t step = 1;
  if (r == 0) {
    uint64_t x[2] = {1, 2};
    c.send(1, x, sizeof(x), OpId{step, 3});
  } else if (r == 1) {
    uint64_t y[1];
    try {
      c.recv(0, y, sizeof(y), OpId{step, 3});
      EXPECT(false, "a 16-byte blob was received into 8 bytes");
    } catch (const CommError& err) {
      EXPECT(std::string(err.what()).find("recv g=6 s=1 op=3") != std::string::npos, err.what());
    }
  }
  return g_failures ? 1 : 0;
}

// Wall-clock microseconds in a file: how ranks tell each other when something happened.
void write_time(const std::string& path, int64_t us) { std::ofstream(path) << us; }

// abort: rank 0 is revoked mid-collective (abort()); every rank fails as Aborted, the
// others "relayed by rank 0". abort_failed: rank 0 cuts itself off (abort_failed(), as D4
// self-fencing does): it fails as Aborted, the others with PeerFailed naming it.
int scenario_abort(bool as_failed) {
  Env e = make_env();
  const int r = e.re.rank;
  std::atomic<int> chunks{0};
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(3000);
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  // Zero-copy (_reg): its events are phases (1 = reduce begins, 2 = gather begins). The
  // other ranks hold at phase 1 until rank 0 has aborted, so rank 0 cannot complete (it
  // needs their sums) and the abort lands mid-collective whatever the scheduling: rank 0
  // has summed its segment and waits for theirs, as a rank does when a peer is revoked.
  // (While the driver sums, an abort is seen between 64 KiB pieces — if the driver has
  // the core; on this 2-core VM at load 25 a summing driver was seen preempted for 37 ms.)
  // Messages (not _reg): rank 0's driver holds at chunk 3 until the other thread's abort()
  // has set the flag, so the abort lands mid-collective whatever the scheduling (at load
  // 10-12 the aborting thread was seen starved until all ranks had finished the 32 MiB
  // all-reduce: "collective finished although rank 0 aborted", a race of this test).
  const int abort_at = all_registered() ? 2 : 3;
  std::atomic<UcxCommunicator*> self{nullptr};
  o.on_chunk = [&](const ChunkEvent& ev) {
    chunks.store(static_cast<int>(ev.chunks_done));
    if (r != 0 && all_registered() && ev.chunks_done == 1) e.store->wait_get("aborted", std::chrono::seconds(20));
    if (r == 0 && !all_registered() && ev.step == 812 && ev.op == 1 && ev.chunks_done == static_cast<uint64_t>(abort_at)) {
      while (!self.load()->aborted()) std::this_thread::yield();
    }
  };
  UcxCommunicator c(e.ctx, *e.store, r, e.re.world, 7, o);
  self.store(&c);
  TestBuf<float> big(size_t{8} << 20, 1.0f);
  TestBuf<float> second(1000, 1.0f);
  // Rank 0 aborts from another thread once its all-reduce is under way (3 chunks done).
  std::atomic<int64_t> aborted_ns{0}, aborted_wall_us{0};  // written by the aborting thread
  std::thread aborter;
  if (r == 0) {
    aborter = std::thread([&] {
      while (chunks.load() < abort_at) std::this_thread::yield();
      aborted_ns.store(rf::now_ns());
      aborted_wall_us.store(rf::wall_us());
      if (as_failed) c.abort_failed("test: coordinator revoked g=7");
      else c.abort("test: coordinator revoked g=7");
      e.store->set("aborted", {1});
    });
  }
  auto w1 = c.allreduce_start(whole(big, big.size(), DType::f32), OpId{812, 1});
  auto w2 = c.allreduce_start(whole(second, second.size(), DType::f32), OpId{812, 2});
  for (auto* w : {&w1, &w2}) {
    try {
      (*w)->wait();
      EXPECT(false, "collective finished although rank 0 aborted");
    } catch (const Aborted& err) {
      // Every rank fails with Aborted naming g=7 and the reason: rank 0 because it was
      // revoked, the others because rank 0's farewell relayed the revocation. Rank 0 did
      // nothing wrong, so nobody may report it as a failed peer (it is alive, and a
      // survivor's report is what users and the coordinator read to learn what failed).
      EXPECT(err.generation() == 7 && std::string(err.what()).find("g=7") != std::string::npos &&
                 std::string(err.what()).find("coordinator revoked g=7") != std::string::npos,
             err.what());
      EXPECT(err.peer() == -1, "an abort names peer ", err.peer(), " as failed: ", err.what());
      if (r != 0) {
        EXPECT(!as_failed, "rank 0 aborted as failed, but rank ", r, " got Aborted: ", err.what());
        EXPECT(std::string(err.what()).find("relayed by rank ") != std::string::npos, err.what());
        EXPECT(std::string(err.what()).find("failed") == std::string::npos, err.what());
        std::cerr << "rank " << r << ": " << err.what() << "\n";
        continue;
      }
      if (aborter.joinable()) aborter.join();
      const double ms = static_cast<double>(rf::now_ns() - aborted_ns.load()) / 1e6;
      EXPECT(std::string(err.what()).find("relayed") == std::string::npos, err.what());
      // The communicator fails the collective within 10 ms (its flight record's end time,
      // checked below); the waiting thread returning also depends on the OS scheduling it,
      // which on 2 overloaded cores can take a time slice or two.
      EXPECT(ms <= 1000.0, "wait() returned ", ms, " ms after abort()");
      std::cerr << "rank 0: " << err.what() << " (wait() returned " << ms << " ms after abort())\n";
    } catch (const PeerFailed& err) {
      // Before the fix, abort() gave the others this too ("peer 0 failed (rank 0 aborted:
      // ...)"): untrue, rank 0 only obeyed a revocation. After abort_failed() it is right.
      EXPECT(as_failed && r != 0, "rank ", r, " got PeerFailed: ", err.what());
      EXPECT(err.peer() == 0 && std::string(err.what()).find("rank 0 aborted: test: coordinator revoked g=7") !=
                                    std::string::npos,
             err.what());
      if (as_failed) std::cerr << "rank " << r << ": " << err.what() << "\n";
    } catch (const CommError& err) {
      EXPECT(false, "rank ", r, " got a CommError other than Aborted or PeerFailed: ", err.what());
    }
  }
  if (r == 0) {
    // Future operations fail at once, too.
    const TimePoint t = rf::Clock::now();
    try {
      c.barrier(OpId{813, 0});
      EXPECT(false, "barrier after abort succeeded");
    } catch (const Aborted& err) {
      EXPECT(elapsed_ms(t) <= 10.0, "future op took ", elapsed_ms(t), " ms to fail");
      EXPECT(std::string(err.what()).find("s=813") != std::string::npos, err.what());
    }
    std::ifstream fr(o.flight_recorder_path);
    std::stringstream ss;
    ss << fr.rdbuf();
    EXPECT(ss.str().find("\"state\":\"failed\"") != std::string::npos, "flight recorder: ", ss.str());
    // Both pending collectives were failed within 10 ms of abort() (wall clock, as the
    // flight recorder keeps it).
    int failed = 0;
    for (const FlightRecord& rec : c.flight_recorder().snapshot()) {
      if (rec.step != 812) continue;
      ++failed;
      const double ms = static_cast<double>(rec.end_us - aborted_wall_us.load()) / 1000.0;
      EXPECT(rec.state == FlightRecord::State::failed && ms <= 10.0, "op ", rec.op, " failed ", ms,
             " ms after abort()");
      std::cerr << "rank 0: op " << rec.op << " failed " << ms << " ms after abort()\n";
    }
    EXPECT(failed == 2, "flight records of step 812: ", failed);
  } else {
    // The post-mortem of the other ranks tells the same truth: aborted, relayed, no peer
    // (abort_failed: rank 0 named).
    int failed = 0;
    for (const FlightRecord& rec : c.flight_recorder().snapshot()) {
      if (rec.step != 812) continue;
      ++failed;
      EXPECT(rec.state == FlightRecord::State::failed && rec.peer == (as_failed ? 0 : -1) &&
                 rec.cause.find(as_failed ? "rank 0 aborted: " : "relayed by rank ") != std::string::npos,
             "op ", rec.op, " flight record: peer ", rec.peer, ", cause ", rec.cause);
    }
    EXPECT(failed == 2, "flight records of step 812: ", failed);
  }
  if (aborter.joinable()) aborter.join();
  return g_failures ? 1 : 0;
}

int scenario_kill() {
  Env e = make_env();
  const int r = e.re.rank, W = e.re.world, victim = W / 2;
  const std::string killed_file = e.re.store_dir + "/killed_at";
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(5000);
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  if (r == victim) {
    o.on_chunk = [&](const ChunkEvent& ev) {
      // Zero-copy: phase 1 (reduce begins), before this rank publishes its segment.
      if (ev.chunks_done == (all_registered() ? 1u : 3u)) {
        write_time(killed_file, rf::wall_us());
        raise(SIGKILL);
      }
    };
  }
  auto comm = std::make_unique<UcxCommunicator>(e.ctx, *e.store, r, W, 2, o);
  TestBuf<float> big(size_t{8} << 20, 1.0f);
  try {
    comm->allreduce(whole(big, big.size(), DType::f32), OpId{150, 0});
    EXPECT(false, "all-reduce finished although rank ", victim, " was killed");
  } catch (const CommError& err) {
    const int64_t now = rf::wall_us();
    std::ifstream in(killed_file);
    int64_t at = 0;
    in >> at;
    EXPECT(at > 0, "the victim left no time");
    const double ms = static_cast<double>(now - at) / 1000.0;
    EXPECT(ms <= 1000.0, "failed ", ms, " ms after the kill: ", err.what());
    EXPECT(dynamic_cast<const PeerFailed*>(&err) != nullptr, "not PeerFailed: ", err.what());
    EXPECT(err.peer() == victim && std::string(err.what()).find(rf::str("peer ", victim)) != std::string::npos,
           "does not name the dead peer ", victim, ": ", err.what());
    EXPECT(std::string(err.what()).find("g=2 s=150") != std::string::npos, err.what());
    std::cerr << "rank " << r << " failed " << ms << " ms after the kill: " << err.what() << "\n";
  }
  // The victim's right neighbour read the victim's first pieces (single-copy path).
  if (r == (victim + 1) % W) check_single_copy(*comm, !all_registered());
  // Teardown is bounded although a peer is dead.
  const TimePoint t = rf::Clock::now();
  comm.reset();
  EXPECT(elapsed_ms(t) < 1000, "teardown took ", elapsed_ms(t), " ms");
  return g_failures ? 1 : 0;
}

int scenario_stall() {
  Env e = make_env();
  const int r = e.re.rank;
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(300);
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  auto comm = std::make_unique<UcxCommunicator>(e.ctx, *e.store, r, e.re.world, 4, o);
  UcxCommunicator& c = *comm;
  if (r == 1) {
    // Rank 1 never joins the collective; it leaves once rank 0 has seen the stall.
    e.store->wait_get("stall-seen", std::chrono::seconds(20));
    return 0;
  }
  std::vector<float> buf(100000, 1.0f);
  const TimePoint t = rf::Clock::now();
  try {
    c.allreduce(Buffer{buf.data(), buf.size(), DType::f32}, OpId{33, 1});
    EXPECT(false, "all-reduce finished without rank 1");
  } catch (const TimedOut& err) {
    const double ms = elapsed_ms(t);
    EXPECT(ms >= 290 && ms <= 1500, "stall detected after ", ms, " ms (timeout 300)");
    EXPECT(err.peer() == 1 && std::string(err.what()).find("peer 1") != std::string::npos, err.what());
    EXPECT(std::string(err.what()).find("g=4 s=33 op=1") != std::string::npos, err.what());
  } catch (const CommError& err) {
    EXPECT(false, "wrong error type: ", err.what());
  }
  std::ifstream fr(o.flight_recorder_path);
  std::stringstream ss;
  ss << fr.rdbuf();
  EXPECT(ss.str().find("\"peer\":1") != std::string::npos && ss.str().find("\"state\":\"failed\"") != std::string::npos,
         "flight recorder lacks the failed record: ", ss.str());
  // Teardown is bounded although rank 1 hangs (it is still alive and never answers).
  const TimePoint td = rf::Clock::now();
  comm.reset();
  EXPECT(elapsed_ms(td) < 1000, "teardown took ", elapsed_ms(td), " ms");
  e.store->set("stall-seen", {1});
  return g_failures ? 1 : 0;
}

int scenario_fence() {
  Env e = make_env();
  const int r = e.re.rank;
  UcxCommunicator c(e.ctx, *e.store, r, e.re.world, 9);
  // Rank 0 first sends messages tagged with the neighbouring generations 8 and 10 and the
  // very (step, op, chunk) rank 1 is about to receive; then the real ones. Receives match
  // all tag bits, so the strays must never be delivered.
  const uint64_t wrong = 0xBADBADBADBADull, right = 0x600D600D600Dull;
  std::vector<float> buf(64, 1.0f);
  if (r == 0) {
    for (uint64_t g : {8u, 10u}) {
      c.send_foreign_generation(1, g, OpId{20, 0}, /*chunk = sender rank*/ 0, &wrong, sizeof(wrong));
      std::vector<float> junk(64, 1000.0f);
      for (uint32_t ch = 0; ch < 4; ++ch) c.send_foreign_generation(1, g, OpId{21, 0}, ch, junk.data(), 256);
    }
    c.send(1, &right, sizeof(right), OpId{20, 0});
  } else if (r == 1) {
    uint64_t got = 0;
    c.recv(0, &got, sizeof(got), OpId{20, 0});
    EXPECT(got == right, "received ", std::hex, got, " instead of ", right);
  }
  c.allreduce(Buffer{buf.data(), buf.size(), DType::f32}, OpId{21, 0});
  for (float v : buf) EXPECT(v == static_cast<float>(e.re.world), "all-reduce got ", v, ": a stray was delivered");
  c.barrier(OpId{22, 0});
  return g_failures ? 1 : 0;
}

int scenario_drop() {
  Env e = make_env();
  const int r = e.re.rank, W = e.re.world;
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(2000);
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  UcxCommunicator* self = nullptr;
  if (r == 1) o.on_chunk = [&](const ChunkEvent& ev) { if (ev.chunks_done == 2) self->inject_drop(); };
  UcxCommunicator c(e.ctx, *e.store, r, W, 1, o);
  self = &c;
  std::vector<float> big(size_t{4} << 20, 1.0f);
  const TimePoint t = rf::Clock::now();
  try {
    c.allreduce(Buffer{big.data(), big.size(), DType::f32}, OpId{5, 0});
    EXPECT(false, "all-reduce finished although rank 1 dropped its transport");
  } catch (const PeerFailed& err) {
    EXPECT(err.peer() == 1, err.what());
    EXPECT(elapsed_ms(t) < 2000, "took ", elapsed_ms(t), " ms: ", err.what());
  } catch (const CommError& err) {
    EXPECT(false, "expected PeerFailed naming rank 1: ", err.what());
  }
  return g_failures ? 1 : 0;
}

// Destroying a communicator with a collective in flight (its progress thread driving it, a
// peer that never joins): bounded, and the Work then says why it failed.
int scenario_destroy() {
  Env e = make_env();
  const int r = e.re.rank;
  UcxOptions o = base_options();
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  auto comm = std::make_unique<UcxCommunicator>(e.ctx, *e.store, r, e.re.world, 11, o);
  if (r == 1) {
    e.store->wait_get("destroyed", std::chrono::seconds(20));
    return 0;
  }
  std::vector<float> buf(size_t{1} << 20, 1.0f);
  WorkPtr w = comm->allreduce_start(Buffer{buf.data(), buf.size(), DType::f32}, OpId{1, 0});
  EXPECT(!w->test(), "finished without rank 1");
  const TimePoint t = rf::Clock::now();
  comm.reset();
  EXPECT(elapsed_ms(t) < 1000, "destroying took ", elapsed_ms(t), " ms");
  try {
    w->wait();
    EXPECT(false, "the collective succeeded after its communicator was destroyed");
  } catch (const Aborted& err) {
    EXPECT(std::string(err.what()).find("communicator destroyed") != std::string::npos, err.what());
  }
  e.store->set("destroyed", {1});
  return g_failures ? 1 : 0;
}

// Abort between the reduce-scatter and the all-gather, with the all-gather piece already
// offered for a single-copy read: rank 0 aborts (from on_chunk), and as soon as its
// all-reduce has failed it scribbles over its buffer, as a caller may. Rank 1 holds its
// read back until then (its on_chunk waits for the store key, a condition, not a sleep).
// Rank 1 must then fail, or complete with exactly the right sum: never with bytes read
// after their owner could modify them (R1/R4; the hold word, ucx/single_copy.h).
// sc_release: the same, but rank 0 only releases (inject_release) and scribbles inside its
// on_chunk, sending no farewell: rank 1's read finds the hold word cleared and must fail.
int scenario_sc_abort(bool release_only) {
  Env e = make_env();
  const int r = e.re.rank;
  UcxOptions o = base_options();
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  o.flows = 1;
  o.chunk_bytes = size_t{1} << 20;  // one piece per segment: chunk 0 reduce-scatter, 1 all-gather
  o.small_allreduce_bytes = 0;      // the ring, whatever the size
  UcxCommunicator* self = nullptr;
  TestBuf<float> buf(size_t{1} << 18, static_cast<float>(r + 1));  // 1 MiB: two 512 KiB segments
  bool scribbled = false;
  if (r == 0 && release_only) {
    o.on_chunk = [&](const ChunkEvent& ev) {
      if (ev.chunks_done != 1) return;
      // Zero-copy: rank 1 maps our buffer before its phase 1; release only after that, so
      // the check after its reads is what must fail it (a release before its mapping
      // fails the mapping instead: zc_refd).
      if (all_registered()) e.store->wait_get("mapped", std::chrono::seconds(20));
      self->inject_release();
      std::fill(buf.begin(), buf.end(), std::numeric_limits<float>::quiet_NaN());
      e.store->set("scribbled", {1});
      scribbled = true;
    };
  } else if (r == 0) {
    o.on_chunk = [&](const ChunkEvent& ev) { if (ev.chunks_done == 1) self->abort("test: abort mid-transfer"); };
  } else {
    o.on_chunk = [&](const ChunkEvent& ev) {
      if (ev.chunks_done != 1) return;
      if (all_registered()) e.store->set("mapped", {1});
      e.store->wait_get("scribbled", std::chrono::seconds(20));
    };
  }
  UcxCommunicator c(e.ctx, *e.store, r, e.re.world, 12, o);
  self = &c;
  try {
    c.allreduce(whole(buf, buf.size(), DType::f32), OpId{7, 0});
    EXPECT(r == 1, "rank 0 completed although it aborted");
    size_t bad = 0;
    for (float v : buf) bad += v != 3.0f;
    EXPECT(bad == 0, bad, " wrong elements: completed with bytes read after rank 0 released them");
    std::cerr << "rank " << r << ": completed with the right sum (read before rank 0 released its buffer)\n";
  } catch (const CommError& err) {
    if (r == 0 && release_only) {
      EXPECT(err.peer() == 1 || err.peer() == 0, err.what());  // rank 1's failure reaches it
    } else if (r == 0) {
      EXPECT(dynamic_cast<const Aborted*>(&err) != nullptr, err.what());
      std::fill(buf.begin(), buf.end(), std::numeric_limits<float>::quiet_NaN());
      e.store->set("scribbled", {1});
      scribbled = true;
    } else if (release_only) {
      // No farewell came: the released buffer is all rank 1 knows, and it names its owner.
      EXPECT(err.peer() == 0, "does not name rank 0: ", err.what());
      EXPECT(std::string(err.what()).find("released its buffer") != std::string::npos, err.what());
      std::cerr << "rank " << r << " failed as it should: " << err.what() << "\n";
    } else {
      // Rank 0 aborted (said so in a farewell sent before it released its buffer, so the
      // failed read finds it): rank 1 fails as aborted, relayed, blaming nobody.
      EXPECT(dynamic_cast<const Aborted*>(&err) != nullptr && err.peer() == -1 &&
                 std::string(err.what()).find("abort mid-transfer; relayed by rank 0") != std::string::npos,
             "not the relayed abort: ", err.what());
      std::cerr << "rank " << r << " failed as it should: " << err.what() << "\n";
    }
  }
  if (r == 0 && !scribbled) e.store->set("scribbled", {1});  // never leave rank 1 waiting
  if (r == 1) check_single_copy(c, !all_registered());  // its reduce-scatter piece came single-copy
  if (all_registered()) EXPECT(c.zero_copy_allreduces() == 1, "not zero-copy");
  return g_failures ? 1 : 0;
}

// sc_cap: the single-copy path's size cap (UcxOptions::single_copy_max_bytes). Collectives
// above the cap move through the FIFOs (no read), those at or below it read single-copy,
// and both give the right sums.
int scenario_sc_cap() {
  Env e = make_env();
  UcxOptions o = base_options();
  o.single_copy_max_bytes = int64_t{1} << 20;
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 3, o);
  std::vector<float> f(size_t{1} << 19);
  check_allreduce(c, f, size_t{1} << 19, DType::f32, 0);  // 2 MiB: above the cap
  EXPECT(c.single_copy_reads() == 0, c.single_copy_reads(), " single-copy reads above the cap");
  check_allreduce(c, f, size_t{1} << 18, DType::f32, 1);  // 1 MiB: at the cap
  EXPECT(c.single_copy_reads() > 0, "no single-copy read at the cap");
  c.barrier(OpId{2, 0});
  return g_failures ? 1 : 0;
}

// sc_cap_async: how ddp uses comm (Reducer: big buckets started, the last small bucket
// run blocking). An all-reduce above the size cap (FIFO path) is started and still
// outstanding when a blocking one below the cap (single-copy) runs; then the reverse
// order of waits. Both are checked against the double reference.
void check_sum(const std::vector<float>& buf, size_t count, int W, const char* what) {
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < count; ++i) {
    double ref = 0, mag = 0;
    for (int q = 0; q < W; ++q) {
      ref += static_cast<double>(typed_value<float>(q, i));
      mag += std::fabs(static_cast<double>(typed_value<float>(q, i)));
    }
    if (std::fabs(static_cast<double>(buf[i]) - ref) > 1e-6 * (mag + 1) * W && bad++ == 0) {
      first_bad = i;
      std::cerr.precision(17);
      std::cerr << "  " << what << " element " << i << ": got " << static_cast<double>(buf[i]) << " want " << ref << "\n";
    }
  }
  EXPECT(bad == 0, what, " count ", count, ": ", bad, " wrong elements, first at ", first_bad);
}

int scenario_sc_cap_async() {
  Env e = make_env();
  UcxOptions o = base_options();
  o.single_copy_max_bytes = int64_t{1} << 20;
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 3, o);
  const int W = e.re.world, r = e.re.rank;
  const size_t big_n = (size_t{2} << 20) + 7, small_n = (size_t{1} << 17) + 5;  // 8 MiB, 512 KiB
  std::vector<float> big(big_n), small(small_n);
  for (uint64_t step = 0; step < 3; ++step) {
    for (size_t i = 0; i < big_n; ++i) big[i] = typed_value<float>(r, i);
    for (size_t i = 0; i < small_n; ++i) small[i] = typed_value<float>(r, i);
    WorkPtr w = c.allreduce_start(Buffer{big.data(), big_n, DType::f32}, OpId{step, 0});
    if (step == 1) w->wait();  // the ddp order: wait for the started, then the blocking one
    c.allreduce(Buffer{small.data(), small_n, DType::f32}, OpId{step, 1});
    w->wait();
    check_sum(big, big_n, W, "started (above the cap)");
    check_sum(small, small_n, W, "blocking (below the cap)");
  }
  check_single_copy(c, true);  // the small one did read single-copy
  c.barrier(OpId{9, 0});
  return g_failures ? 1 : 0;
}

// regen (run as regen_reg): buckets outlive generations. Generation 1 all-reduces two
// registered buffers zero-copy; generation 2 (a new communicator, same processes) does it
// again: right sums both times, and generation 2 maps no peer buffer anew (the mappings are
// cached process-wide, so a recovery's survivors do not pay the page-table set-up again).
int scenario_regen() {
  Env e = make_env();
  EXPECT(all_registered(), "regen runs as regen_reg");
  TestBuf<float> a(size_t{1} << 18), b((size_t{1} << 16) + 7);
  uint64_t maps_after_g1 = 0;
  for (uint64_t g = 1; g <= 2; ++g) {
    UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, g, base_options());
    check_allreduce(c, a, a.size(), DType::f32, 10 * g);
    check_allreduce(c, b, b.size(), DType::f32, 10 * g + 2);
    EXPECT(c.zero_copy_allreduces() == 2, "generation ", g, ": ", c.zero_copy_allreduces(), " zero-copy all-reduces");
    if (g == 1) maps_after_g1 = peer_buffer_maps_made();
    else EXPECT(peer_buffer_maps_made() == maps_after_g1, "generation 2 mapped ", peer_buffer_maps_made() - maps_after_g1, " peer buffers again");
    c.barrier(OpId{10 * g + 5, 0});  // nobody destroys its communicator while a peer still needs it
  }
  EXPECT(maps_after_g1 == 2 * static_cast<uint64_t>(e.re.world - 1), "generation 1 mapped ", maps_after_g1);
  return g_failures ? 1 : 0;
}

// zc_refd: a peer's registered buffer is freed, and its fd number reused, between its
// `entered` word and our first mapping of it. Rank 1 enters zero-copy all-reduce 2 on a
// fresh 1 MiB buffer B, aborts, frees B and allocates a one-page SharedBuffer that gets
// B's old fd number. Rank 0 is held (its on_chunk, at the done phase of all-reduce 1)
// until then; in the same pump it goes on with all-reduce 2, sees rank 1's `entered`, and
// maps /proc/<pid 1>/fd/<fd>: now a one-page file, not B. It must fail that collective
// with an error naming rank 1 — never read past that file's end (SIGBUS). zc_refd_same:
// the new file is as large as B; rank 0 must fail too, and must not have cached (counted)
// a mapping of that other file as B's. Synchronised by the store and rank 1's own control
// segment, no sleeps.
const ShmControl* own_control_segment() {
  // This process has one communicator: its segment is the memfd named ringfence-comm.
  for (int fd = 0; fd < 4096; ++fd) {
    char link[256];
    const ssize_t n = readlink(rf::str("/proc/self/fd/", fd).c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = 0;
    if (std::strstr(link, "memfd:ringfence-comm") == nullptr) continue;
    void* p = mmap(nullptr, sizeof(ShmControl), PROT_READ, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : static_cast<const ShmControl*>(p);
  }
  return nullptr;
}

int scenario_zc_refd(bool same_size) {
  Env e = make_env();
  const int r = e.re.rank;
  EXPECT(e.re.world == 2 && all_registered(), "zc_refd runs as zc_refd_reg 2");
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(5000);
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  if (r == 0) {
    o.on_chunk = [&](const ChunkEvent& ev) {
      if (ev.step == 1 && ev.chunks_done == 3) e.store->wait_get("swapped", std::chrono::seconds(20));
    };
  }
  UcxCommunicator c(e.ctx, *e.store, r, 2, 4, o);
  SharedBuffer a(size_t{1} << 20), b(size_t{1} << 20);
  const size_t n = a.bytes() / sizeof(float);
  std::fill(a.as<float>(), a.as<float>() + n, 1.0f);
  std::fill(b.as<float>(), b.as<float>() + n, 2.0f);
  const uint64_t maps = peer_buffer_maps_made();  // rank 0 maps rank 1's A, and only A
  Buffer whole_a{a.data(), n, DType::f32}, whole_b{b.data(), n, DType::f32};
  whole_a.registered = &a;
  whole_b.registered = &b;
  auto w1 = c.allreduce_start(whole_a, OpId{1, 0});
  if (r == 0) {
    auto w2 = c.allreduce_start(whole_b, OpId{2, 0});
    w1->wait();
    try {
      w2->wait();
      EXPECT(false, "all-reduce 2 completed although rank 1 aborted and freed its buffer");
    } catch (const CommError& err) {
      // The mapping fails (never SIGBUS); before blaming rank 1 for it, rank 0 reads what
      // UCX holds and finds rank 1's farewell, sent before it released B: it aborted, so
      // rank 0 fails as aborted, relayed by rank 1 (a failed rank 1 would be named).
      EXPECT(dynamic_cast<const Aborted*>(&err) != nullptr &&
                 std::string(err.what()).find("rank 1 leaves all-reduce 2; relayed by rank 1") != std::string::npos,
             "not rank 1's relayed abort: ", err.what());
      std::cerr << "rank 0 failed as it should: " << err.what() << "\n";
    }
    EXPECT(peer_buffer_maps_made() == maps + 1, "mapped (and cached) another file as rank 1's buffer B");
    e.store->set("rank0_done", {1});
    return g_failures ? 1 : 0;
  }
  w1->wait();
  const ShmControl* seg = own_control_segment();
  EXPECT(seg != nullptr, "cannot find this rank's control segment");
  if (!seg) {
    e.store->set("swapped", {1});
    return 1;
  }
  SharedRange old;
  EXPECT(b.range_of(b.data(), b.bytes(), &old), "buffer B is not shared");
  auto w2 = c.allreduce_start(whole_b, OpId{2, 0});
  // Entered all-reduce 2 (rank 0 is held, so it cannot have gone further).
  const TimePoint until = rf::Clock::now() + std::chrono::seconds(20);
  while (seg->entered.load(std::memory_order_acquire) >> 1 < 2 && rf::Clock::now() < until) std::this_thread::yield();
  EXPECT(seg->entered.load() >> 1 == 2, "rank 1 never entered all-reduce 2");
  c.abort("test: rank 1 leaves all-reduce 2");
  try {
    w2->wait();
  } catch (const CommError&) {
  }
  // B's fd is closed, and its number reused by a new buffer (the lowest free fd).
  std::vector<SharedBuffer> pages;
  SharedRange now;
  const size_t reuse_bytes = same_size ? b.bytes() : 4096;
  b = SharedBuffer();
  for (int i = 0; i < 64; ++i) {
    pages.emplace_back(reuse_bytes);
    if (pages.back().range_of(pages.back().data(), reuse_bytes, &now) && now.fd == old.fd) break;
  }
  EXPECT(now.fd == old.fd, "fd ", old.fd, " was not reused");
  e.store->set("swapped", {1});
  e.store->wait_get("rank0_done", std::chrono::seconds(20));  // our /proc entry must stay
  munmap(const_cast<ShmControl*>(seg), sizeof(ShmControl));
  return g_failures ? 1 : 0;
}

// slot_mismatch: rank 1 uses other shm_slot_bytes (a misconfiguration): its control
// segment has another size, so the connect-time probe must switch the shared-memory path
// off on every rank alike (all or none), and all-reduces of every size still sum right.
int scenario_slot_mismatch() {
  Env e = make_env();
  UcxOptions o = base_options();
  if (e.re.rank == 1) o.shm_slot_bytes = 3 * o.shm_slot_bytes;
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 6, o);
  EXPECT(!c.shm_path(), "shared-memory path on although rank 1 uses other slots");
  TestBuf<float> f(size_t{1} << 16);
  uint64_t step = 0;
  for (size_t n : {size_t{5}, size_t{1500}, size_t{1} << 16}) check_allreduce(c, f, n, DType::f32, step++);
  EXPECT(c.slot_allreduces() == 0 && c.zero_copy_allreduces() == 0, "shared-memory all-reduces with the path off");
  c.barrier(OpId{step, 0});
  return g_failures ? 1 : 0;
}

// tag_mismatch: rank 1 all-reduces step 6 where rank 0 all-reduces step 5 (a caller bug,
// or a rank a step off). Messages carry the tag, so the ring never matches them; the
// shared-memory paths must not silently sum the two steps either: every rank fails with a
// typed error, for a small (slot) and a large (zero-copy under _reg) all-reduce.
int scenario_tag_mismatch() {
  Env e = make_env();
  const int r = e.re.rank;
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(2000);  // the message paths end by D3
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  uint64_t g = 20;
  for (size_t n : {size_t{16}, size_t{1} << 16}) {
    UcxCommunicator c(e.ctx, *e.store, r, e.re.world, g++, o);
    TestBuf<float> f(n, 1.0f);
    try {
      c.allreduce(whole(f, n, DType::f32), OpId{r == 1 ? 6u : 5u, 0});
      EXPECT(false, "count ", n, ": all-reduce of step 5 with step 6 completed (sum ", f[0], ")");
    } catch (const CommError& err) {
      std::cerr << "rank " << r << " count " << n << " failed as it should: " << err.what() << "\n";
    }
  }
  return g_failures ? 1 : 0;
}

int run_rank(const std::string& scenario) {
  try {
    if (scenario == "allreduce") return scenario_allreduce(false);
    if (scenario == "large") return scenario_allreduce(true);
    if (scenario == "collectives") return scenario_collectives();
    if (scenario == "blob_size") return scenario_blob_size();
    if (scenario == "destroy") return scenario_destroy();
    if (scenario == "abort") return scenario_abort(false);
    if (scenario == "abort_failed") return scenario_abort(true);
    if (scenario == "kill") return scenario_kill();
    if (scenario == "stall") return scenario_stall();
    if (scenario == "fence") return scenario_fence();
    if (scenario == "drop") return scenario_drop();
    if (scenario == "sc_abort") return scenario_sc_abort(false);
    if (scenario == "sc_release") return scenario_sc_abort(true);
    if (scenario == "sc_cap") return scenario_sc_cap();
    if (scenario == "sc_cap_async") return scenario_sc_cap_async();
    if (scenario == "regen") return scenario_regen();
    if (scenario == "slot_mismatch") return scenario_slot_mismatch();
    if (scenario == "tag_mismatch") return scenario_tag_mismatch();
    if (scenario == "zc_refd") return scenario_zc_refd(false);
    if (scenario == "zc_refd_same") return scenario_zc_refd(true);
    std::cerr << "unknown scenario " << scenario << "\n";
    return 2;
  } catch (const std::exception& err) {
    std::cerr << "rank " << g_rank << ": unexpected error: " << err.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: comm_mp_test <scenario> <W>\n";
    return 2;
  }
  std::string scenario = argv[1];
  // Suffixes select a variant (see the helpers above); the ranks strip them too.
  static const std::pair<const char*, const char*> kSuffixes[] = {
      {"_fifo", "RF_TEST_FIFO"}, {"_mixed", "RF_TEST_MIXED"}, {"_halfreg", "RF_TEST_HALFREG"},
      {"_reg", "RF_TEST_REG"}, {"_noshm", "RF_TEST_NOSHM"}};
  std::vector<const char*> variant_env;
  for (const auto& [suffix, env] : kSuffixes) {
    const std::string x = suffix;
    if (scenario.size() > x.size() && scenario.compare(scenario.size() - x.size(), x.size(), x) == 0) {
      scenario.resize(scenario.size() - x.size());
      variant_env.push_back(env);
    }
  }
  if (std::getenv("RF_RANK")) return run_rank(scenario);
  LocalLaunch l;
  l.program = "/proc/self/exe";
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    l.program = self;
  }
  l.args = {argv[1], argv[2]};  // the ranks strip the suffix themselves
  l.world = std::atoi(argv[2]);
  l.deadline = std::chrono::seconds(scenario == "large" ? 150 : 60);
  // Strays of the fence test and leftovers of aborted collectives are expected; UCX's
  // warnings about them would only bury the report.
  for (const char* env : variant_env) l.env.push_back({env, "1"});
  if (!std::getenv("UCX_LOG_LEVEL")) l.env.push_back({"UCX_LOG_LEVEL", "error"});
  // UCX's own fatal-signal handlers (backtraces, "freeze") must not get in the way of a
  // rank that the test kills or that crashes: the launcher reports how each rank ended.
  if (!std::getenv("UCX_HANDLE_ERRORS")) l.env.push_back({"UCX_HANDLE_ERRORS", "none"});
  const TimePoint t = rf::Clock::now();
  int rc = 0;
  for (const RankExit& x : run_local_ranks(l)) {
    const bool victim = scenario == "kill" && x.rank == l.world / 2;
    const bool expected = victim ? (WIFSIGNALED(x.status) && WTERMSIG(x.status) == SIGKILL && !x.killed_at_deadline) : x.ok();
    if (!expected) rc = 1;
    std::cerr << (expected ? "  ok   " : "  FAIL ") << x.describe() << "\n";
  }
  std::cerr << "comm_mp_test " << scenario << " W=" << l.world << ": " << (rc ? "FAILED" : "passed") << " in "
            << elapsed_ms(t) / 1000 << " s\n";
  return rc;
}
