// comm_staging_gpu_test — the UCX fallback on device buffers (comm/cuda/device_staging.h)
// with W processes sharing one GPU (cuda:0), started and reaped by run_local_ranks
// (comm/bootstrap/local_launcher.h) with a deadline, a FileStore in a fresh temporary directory.
//
//   comm_staging_gpu_test <scenario> <W>    the launcher: starts W ranks, checks how each ended
//
// Without a GPU the launcher prints "SKIPPED: no GPU: <reason>" and exits 77 (ctest: skipped).
// Scenarios:
//   allreduce  sizes 0 .. 48 Mi elements (f32, f64, i64), one at a time and four outstanding
//              at once, three steps (the staging is reused): each device result bitwise
//              equal to the same all-reduce of the same values on registered host buffers
//   stream     a kernel writes, the all-reduce, a kernel reads, all on the runtime's stream
//              with no host wait between: the reader sees the sum
//   kill       rank W/2 is SIGKILLed in the middle of an all-reduce: survivors fail with
//              PeerFailed naming it within 1 s (default settings)
//   abort      rank 0 is aborted from another thread, once while its copy into staging is
//              still queued behind a long kernel, once while its peers hold back: Aborted
//              within 1 s, the others fail too
// The communicators come from make_communicator(Backend::Ucx, device = cuda) with the
// staging installed through set_device_backends (comm/device_backends.h), as
// register_cuda_comm() installs it, without the NCCL half.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/str.h"
#include "comm/communicator.h"
#include "comm/cuda/device_memory.h"
#include "comm/cuda/device_staging.h"
#include "comm/device_backends.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/shm/shared_buffer.h"
#include "core/cuda_runtime.h"
#include "core/device_runtime.h"
#include "kernels/op_table.h"
#include "tests/comm/mp_check.h"

using namespace rf::comm;
using rf::TimePoint;
using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

namespace {

struct Env {
  RankEnv re;
  std::unique_ptr<FileStore> store;
  rf::DeviceRuntime* rt = nullptr;
};

Env make_env() {
  Env e;
  e.re = rank_env_from_environment();
  g_rank = e.re.rank;
  e.store = std::make_unique<FileStore>(e.re.store_dir);
  rf::register_cuda_runtime();
  DeviceBackends b;
  b.stage_device_buffers = &cuda::stage_device_buffers;
  b.allocate_device = &cuda::allocate_device_registered;
  set_device_backends(b);
  e.rt = &rf::runtime(rf::Device::cuda(0), "comm_staging_gpu_test");
  return e;
}

std::shared_ptr<Communicator> connect(Env& e, uint64_t generation, ChunkCallback on_chunk = {}) {
  CommOptions o;
  o.store = e.store.get();
  o.rank = e.re.rank;
  o.world = e.re.world;
  o.generation = generation;
  o.device = Device::cuda;
  o.device_index = 0;
  o.on_chunk = std::move(on_chunk);
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(e.re.rank);
  return make_communicator(Backend::Ucx, o);
}

double elapsed_ms(TimePoint since) {
  return std::chrono::duration<double, std::milli>(rf::Clock::now() - since).count();
}

// Correctly rounded operations only; divisions make the values inexact, so sums depend on
// their order (as in comm_mp_test).
double value(int rank, size_t i, int step) {
  const int64_t h =
      static_cast<int64_t>((i * 2654435761u + static_cast<size_t>(rank) * 97u + static_cast<size_t>(step) * 31u) %
                           2000001u) - 1000000;
  return static_cast<double>(h) / 3.0 / (1 + rank % 7);
}

// Host bytes of `count` elements of `dt` for this rank and step.
std::vector<char> pattern(DType dt, size_t count, int rank, int step) {
  std::vector<char> out(count * dtype_size(dt));
  for (size_t i = 0; i < count; ++i) {
    if (dt == DType::f32) {
      const float v = static_cast<float>(value(rank, i, step));
      std::memcpy(out.data() + i * 4, &v, 4);
    } else if (dt == DType::f64) {
      const double v = value(rank, i, step);
      std::memcpy(out.data() + i * 8, &v, 8);
    } else {
      const uint64_t v = (i * 2654435761u + static_cast<uint64_t>(rank) * 40503u) ^ (uint64_t{1} << 62);
      std::memcpy(out.data() + i * 8, &v, 8);
    }
  }
  return out;
}

// One device all-reduce's buffers: the device bytes, and the reference on registered host
// memory (the staging is registered too, so both take the same path and grouping).
struct Case {
  DType dt;
  size_t count;
  std::shared_ptr<RegisteredMemory> device;
  SharedBuffer host;
  Case(DType t, size_t n)
      : dt(t), count(n), device(allocate_registered(n * dtype_size(t), Device::cuda, 0)), host(n * dtype_size(t)) {}
  size_t bytes() const { return count * dtype_size(dt); }
  Buffer device_buffer() const {
    Buffer b{device->data(), count, dt, Device::cuda, 0};
    b.registered = device.get();
    return b;
  }
  Buffer host_buffer() {
    Buffer b{host.data(), count, dt};
    b.registered = &host;
    return b;
  }
};

void fill_case(Env& e, Case& c, int step) {
  const std::vector<char> p = pattern(c.dt, c.count, e.re.rank, step);
  if (c.bytes()) e.rt->write(c.device->data(), p.data(), c.bytes());  // on the stream
  if (c.bytes()) std::memcpy(c.host.data(), p.data(), c.bytes());
}

void check_case(Env& e, Case& c, const char* what, int step) {
  std::vector<char> got(c.bytes());
  if (c.bytes()) e.rt->read(got.data(), c.device->data(), c.bytes());  // waits for the stream
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < c.bytes(); ++i)
    if (got[i] != static_cast<const char*>(c.host.data())[i] && bad++ == 0) first = i;
  EXPECT(bad == 0, what, " step ", step, " ", dtype_name(c.dt), " x ", c.count, ": ", bad,
         " bytes differ from the host all-reduce, first at byte ", first);
}

int scenario_allreduce() {
  Env e = make_env();
  auto comm = connect(e, 1);
  const auto stream = static_cast<Stream>(e.rt->stream());
  uint32_t op = 0;
  std::vector<std::unique_ptr<Case>> one;
  for (DType dt : {DType::f32, DType::f64, DType::i64})
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{65536 + 3}, size_t{1} << 20})
      one.push_back(std::make_unique<Case>(dt, n));
  one.push_back(std::make_unique<Case>(DType::f32, (size_t{48} << 20) + 5));  // 192 MiB: far past any chunk
  // Four outstanding at once, as a step's gradient buckets.
  std::vector<std::unique_ptr<Case>> buckets;
  for (size_t n : {size_t{3} << 20, size_t{1} << 20, size_t{17}, size_t{65536}})
    buckets.push_back(std::make_unique<Case>(DType::f32, n));
  for (int step = 0; step < 3; ++step) {
    for (auto& c : one) {
      fill_case(e, *c, step);
      comm->allreduce_start(c->device_buffer(), OpId{static_cast<uint64_t>(step), op}, stream)->wait();
      comm->allreduce(c->host_buffer(), OpId{static_cast<uint64_t>(step), op + 1});
      op += 2;
      check_case(e, *c, "one at a time:", step);
    }
    std::vector<WorkPtr> works;
    for (auto& c : buckets) {
      fill_case(e, *c, step);
      works.push_back(comm->allreduce_start(c->device_buffer(), OpId{static_cast<uint64_t>(step), op++}, stream));
    }
    for (auto& w : works) w->wait();
    for (auto& c : buckets) comm->allreduce(c->host_buffer(), OpId{static_cast<uint64_t>(step), op++});
    for (auto& c : buckets) check_case(e, *c, "outstanding:", step);
  }
  comm->barrier(OpId{99, 0});
  return g_failures ? 1 : 0;
}

int scenario_stream() {
  Env e = make_env();
  auto comm = connect(e, 2);
  const int r = e.re.rank, W = e.re.world;
  const rf::kernels::Exec ex = e.rt->exec();
  const auto stream = static_cast<Stream>(e.rt->stream());
  const int64_t n = int64_t{16} << 20;  // 64 MiB: the writing kernels take long enough to race
  auto a = allocate_registered(n * sizeof(float), Device::cuda, 0);
  auto out = allocate_registered(n * sizeof(float), Device::cuda, 0);
  auto* da = static_cast<float*>(a->data());
  auto* dout = static_cast<float*>(out->data());
  std::vector<float> host(static_cast<size_t>(n));
  for (int k = 0; k < 5; ++k) {
    // A kernel writes (fill, then x += x: 2(k*W + r + 1)), all-reduce, a kernel reads.
    e.rt->ops().fill(ex, n, static_cast<float>(k * W + r + 1), da);
    e.rt->ops().accumulate(ex, n, da, da, true);
    Buffer b{da, static_cast<size_t>(n), DType::f32, Device::cuda, 0};
    comm->allreduce_start(b, OpId{static_cast<uint64_t>(k), 0}, stream)->wait();
    e.rt->ops().copy(ex, n, da, dout);
    e.rt->read(host.data(), dout, n * sizeof(float));
    float want = 0;
    for (int q = 0; q < W; ++q) want += 2.0f * static_cast<float>(k * W + q + 1);
    size_t bad = 0;
    for (float v : host) bad += v != want;
    EXPECT(bad == 0, "round ", k, ": ", bad, " elements are not ", want, " (first ", host[0], ")");
  }
  comm->barrier(OpId{99, 0});
  return g_failures ? 1 : 0;
}

void write_time(const std::string& path, int64_t us) { std::ofstream(path) << us; }

int scenario_kill() {
  Env e = make_env();
  const int r = e.re.rank, W = e.re.world, victim = W / 2;
  const std::string killed_file = e.re.store_dir + "/killed_at";
  ChunkCallback hook;
  if (r == victim) {
    hook = [&](const ChunkEvent&) {
      write_time(killed_file, rf::wall_us());
      raise(SIGKILL);
    };
  }
  auto comm = connect(e, 3, hook);
  Case c(DType::f32, size_t{8} << 20);
  fill_case(e, c, 0);
  try {
    comm->allreduce_start(c.device_buffer(), OpId{150, 0}, static_cast<Stream>(e.rt->stream()))->wait();
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
    EXPECT(err.peer() == victim, "does not name the dead peer ", victim, ": ", err.what());
    EXPECT(std::string(err.what()).find("g=3 s=150") != std::string::npos, err.what());
    std::cerr << "rank " << r << " failed " << ms << " ms after the kill: " << err.what() << "\n";
  }
  const TimePoint t = rf::Clock::now();
  comm.reset();
  EXPECT(elapsed_ms(t) < 1000, "teardown took ", elapsed_ms(t), " ms");
  return g_failures ? 1 : 0;
}

// Rank 0 is aborted from another thread `after` the start; `busy` keeps its stream busy so
// the copy into staging is still queued then. The others join late (hold back), so nothing
// can complete before the abort.
void abort_case(Env& e, uint64_t generation, bool busy) {
  const int r = e.re.rank;
  std::shared_ptr<RegisteredMemory> busy_scratch;  // freed after the stream is synchronised
  auto comm = connect(e, generation);
  Case c(DType::f32, size_t{4} << 20);
  fill_case(e, c, 0);
  const rf::kernels::Exec ex = e.rt->exec();
  if (r == 0 && busy) {  // 4000 fills of 256 MiB: several hundred ms of kernels ahead of the copy
    const int64_t n = int64_t{64} << 20;
    auto scratch = allocate_registered(static_cast<size_t>(n) * sizeof(float), Device::cuda, 0);
    for (int k = 0; k < 4000; ++k) e.rt->ops().fill(ex, n, 1.0f, static_cast<float*>(scratch->data()));
    busy_scratch = scratch;
  }
  if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::atomic<int64_t> aborted_ns{0};
  std::thread aborter;
  const TimePoint start = rf::Clock::now();
  WorkPtr w = comm->allreduce_start(c.device_buffer(), OpId{812, 1}, static_cast<Stream>(e.rt->stream()));
  if (r == 0) {
    aborter = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      aborted_ns.store(rf::now_ns());
      comm->abort("test: coordinator revoked g=" + std::to_string(generation));
    });
  }
  try {
    w->wait();
    EXPECT(false, "all-reduce finished although rank 0 aborted (busy ", busy, ")");
  } catch (const CommError& err) {
    if (r == 0) {
      aborter.join();
      const double ms = static_cast<double>(rf::now_ns() - aborted_ns.load()) / 1e6;
      EXPECT(dynamic_cast<const Aborted*>(&err) != nullptr, "not Aborted: ", err.what());
      EXPECT(std::string(err.what()).find("coordinator revoked") != std::string::npos, err.what());
      EXPECT(ms <= 1000.0, "wait() returned ", ms, " ms after abort() (busy ", busy, ")");
      std::cerr << "rank 0 (busy " << busy << "): " << err.what() << " (" << ms << " ms after abort(), "
                << elapsed_ms(start) << " ms after the start)\n";
    } else {
      std::cerr << "rank " << r << " (busy " << busy << "): " << err.what() << "\n";
    }
  }
  if (aborter.joinable()) aborter.join();
  // Future operations fail at once.
  if (r == 0) {
    const TimePoint t = rf::Clock::now();
    try {
      comm->allreduce_start(c.device_buffer(), OpId{813, 0}, static_cast<Stream>(e.rt->stream()))->wait();
      EXPECT(false, "all-reduce after abort succeeded");
    } catch (const Aborted&) {
      EXPECT(elapsed_ms(t) <= 100.0, "a later all-reduce took ", elapsed_ms(t), " ms to fail");
    }
  }
  e.rt->synchronize();  // the kernels and copies are done before the buffers go
}

int scenario_abort() {
  Env e = make_env();
  abort_case(e, 7, true);
  abort_case(e, 8, false);
  return g_failures ? 1 : 0;
}

int run_rank(const std::string& scenario) {
  return rf::comm::testing::run_scenario(scenario, {{"allreduce", scenario_allreduce},
                                                    {"stream", scenario_stream},
                                                    {"kill", scenario_kill},
                                                    {"abort", scenario_abort}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: comm_staging_gpu_test <allreduce|stream|kill|abort> <W>\n";
    return 2;
  }
  const std::string scenario = argv[1];
  if (std::getenv("RF_RANK")) return run_rank(scenario);
  // Only the launcher asks: a rank of a test that was started at all has a GPU.
  if (rf::cuda_device_count() == 0) {
    std::printf("SKIPPED: no GPU: %s\n", rf::cuda_unavailable_reason().c_str());
    return 77;
  }
  LocalLaunch l;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  l.program = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string("/proc/self/exe");
  l.args = {argv[1], argv[2]};
  l.world = std::atoi(argv[2]);
  l.deadline = std::chrono::seconds(120);
  if (!std::getenv("UCX_LOG_LEVEL")) l.env.push_back({"UCX_LOG_LEVEL", "error"});
  if (!std::getenv("UCX_HANDLE_ERRORS")) l.env.push_back({"UCX_HANDLE_ERRORS", "none"});
  const TimePoint t = rf::Clock::now();
  int rc = 0;
  for (const RankExit& x : run_local_ranks(l)) {
    const bool victim = scenario == "kill" && x.rank == l.world / 2;
    const bool expected =
        victim ? (WIFSIGNALED(x.status) && WTERMSIG(x.status) == SIGKILL && !x.killed_at_deadline) : x.ok();
    if (!expected) rc = 1;
    std::cerr << (expected ? "  ok   " : "  FAIL ") << x.describe() << "\n";
  }
  std::cerr << "comm_staging_gpu_test " << scenario << " W=" << l.world << ": " << (rc ? "FAILED" : "passed")
            << " in " << elapsed_ms(t) / 1000 << " s\n";
  return rc;
}
