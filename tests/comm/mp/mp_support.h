#pragma once
// What the comm_mp_test scenarios share (tests/comm/comm_mp_test.cpp runs them): each
// rank's environment, the variants a scenario's suffix selects, test buffers, the values
// and the double-precision reference of an all-reduce, and checks of the paths taken.
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


namespace rf::comm::mptest {

using rf::TimePoint;


using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

struct Env {
  RankEnv re;
  std::unique_ptr<FileStore> store;
  std::shared_ptr<UcxContext> ctx;
};

inline Env make_env() {
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
inline bool fifo_only() { return std::getenv("RF_TEST_FIFO") != nullptr; }
inline bool mixed() { return std::getenv("RF_TEST_MIXED") != nullptr; }
inline bool single_copy_on(int rank) { return !fifo_only() && !(mixed() && rank == 0); }
// `<scenario>_reg`: every rank's buffers are SharedBuffers (the zero-copy path);
// `_halfreg`: all but rank 0's (so every rank must agree on the ordinary algorithms);
// `_noshm`: the shared-memory path off (slots and zero-copy), the message paths only.
inline bool no_shm() { return std::getenv("RF_TEST_NOSHM") != nullptr; }
inline bool all_registered() { return std::getenv("RF_TEST_REG") != nullptr; }
inline bool registered(int rank) { return all_registered() || (std::getenv("RF_TEST_HALFREG") != nullptr && rank != 0); }

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
inline void check_paths(const UcxCommunicator& c, bool expect_zero_copy, bool expect_slots) {
  if (c.world_size() == 1) return;
  EXPECT(c.shm_path() == !no_shm(), "shared-memory path ", c.shm_path());
  if (no_shm()) return;
  if (expect_slots) EXPECT(c.slot_allreduces() > 0, "no all-reduce through the slots");
  if (all_registered() && expect_zero_copy) EXPECT(c.zero_copy_allreduces() > 0, "no zero-copy all-reduce");
  if (!all_registered()) EXPECT(c.zero_copy_allreduces() == 0, c.zero_copy_allreduces(), " zero-copy all-reduces");
}

inline UcxOptions base_options() {
  UcxOptions o;
  o.shm = !no_shm();
  o.single_copy = single_copy_on(g_rank);
  return o;
}

inline void check_single_copy(const UcxCommunicator& c, bool expect_reads) {
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

inline double elapsed_ms(TimePoint since) { return std::chrono::duration<double, std::milli>(rf::Clock::now() - since).count(); }

// ---- values and the reference sum, computed in double --------------------------------

// Correctly rounded IEEE operations only (no libm), so every evaluation gives the same bits;
// divisions by 3 and 7 make the values inexact, so sums really depend on their order.
inline double value(int rank, size_t i) {
  const int64_t h = static_cast<int64_t>((i * 2654435761u + static_cast<size_t>(rank) * 97u) % 2000001u) - 1000000;
  return static_cast<double>(h) / 3.0 / (1 + rank % 7);
}

template <typename T>
T typed_value(int rank, size_t i) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(value(rank, i));
  else return static_cast<T>((i * 2654435761u + static_cast<size_t>(rank) * 40503u) ^ (uint64_t{1} << 62));
}

template <typename V>
inline void check_allreduce(Communicator& c, V& buf, size_t count, DType dt, uint64_t step) {
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

// Wall-clock microseconds in a file: how ranks tell each other when something happened.
inline void write_time(const std::string& path, int64_t us) { std::ofstream(path) << us; }

// sc_cap_async: how ddp uses comm (Reducer: big buckets started, the last small bucket
// run blocking). An all-reduce above the size cap (FIFO path) is started and still
// outstanding when a blocking one below the cap (single-copy) runs; then the reverse
// order of waits. Both are checked against the double reference.
inline void check_sum(const std::vector<float>& buf, size_t count, int W, const char* what) {
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

using rf::comm::testing::NamedScenario;
std::vector<NamedScenario> collective_scenarios();
std::vector<NamedScenario> fault_scenarios();
std::vector<NamedScenario> single_copy_scenarios();
std::vector<NamedScenario> shared_memory_scenarios();

}  // namespace rf::comm::mptest
