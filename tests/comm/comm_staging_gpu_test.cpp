// The UCX fallback on device buffers (comm/cuda/device_staging.h) with W processes sharing
// one GPU (label gpu; without a GPU it prints why and exits 77, skipped):
//   sums     three all-reduces of device buffers outstanding at once (1 KiB .. 12 MiB, odd
//            sizes), each filled on the stream right before it starts, with no host wait:
//            every element is the exact sum (integer-valued floats), on every rank;
//   kill     rank W-1 SIGKILLs itself after the first chunk of a 12 MiB all-reduce: every
//            other rank fails with PeerFailed naming it within 2 s.
//
//   comm_staging_gpu_test sums|kill W
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "comm/communicator.h"
#include "comm/cuda/register.h"
#include "comm/errors.h"
#include "comm/file_store.h"
#include "comm/local_launcher.h"
#include "tests/comm/mp_check.h"

using namespace rf;
using namespace rf::comm;
using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

namespace {

#define CU(call)                                                                                 \
  do {                                                                                           \
    const cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::cerr << "rank " << g_rank << ": " #call ": " << cudaGetErrorString(e_) << std::endl;  \
      std::exit(3);                                                                              \
    }                                                                                            \
  } while (0)

Buffer device_floats(float* p, size_t n) {
  Buffer b;
  b.data = p;
  b.count = n;
  b.device = Device::cuda;
  return b;
}

std::shared_ptr<Communicator> connect(const RankEnv& re, FileStore& store, ChunkCallback hook = {}) {
  register_cuda_comm();
  CommOptions o;
  o.store = &store;
  o.rank = re.rank;
  o.world = re.world;
  o.generation = 3;
  o.device = Device::cuda;
  o.stall_timeout = std::chrono::seconds(10);
  o.on_chunk = std::move(hook);
  return make_communicator(Backend::Ucx, o);
}

int scenario_sums(const RankEnv& re) {
  FileStore store(re.store_dir);
  auto c = connect(re, store);
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::vector<size_t> sizes = {257, (size_t{1} << 20) + 3, (size_t{3} << 20) + 7};
  std::vector<float*> dev(sizes.size());
  std::vector<std::vector<float>> host(sizes.size());
  for (int round = 0; round < 3; ++round) {
    std::vector<WorkPtr> works;
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (!dev[k]) CU(cudaMalloc(&dev[k], sizeof(float) * sizes[k]));
      host[k].resize(sizes[k]);
      for (size_t i = 0; i < sizes[k]; ++i) host[k][i] = static_cast<float>((re.rank + 1) * ((i + k + round) % 97));
      // Enqueued on the stream, not waited for: the collective must be ordered after it.
      CU(cudaMemcpyAsync(dev[k], host[k].data(), sizeof(float) * sizes[k], cudaMemcpyHostToDevice, s));
      works.push_back(c->allreduce_start(device_floats(dev[k], sizes[k]), OpId{static_cast<uint64_t>(round), static_cast<uint32_t>(k)}, s));
    }
    for (auto& w : works) w->wait(Clock::now() + std::chrono::seconds(30));
    const float ranks_sum = static_cast<float>(re.world * (re.world + 1) / 2);
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<float> got(sizes[k]);
      CU(cudaMemcpyAsync(got.data(), dev[k], sizeof(float) * sizes[k], cudaMemcpyDeviceToHost, s));
      CU(cudaStreamSynchronize(s));
      size_t wrong = 0;
      for (size_t i = 0; i < sizes[k]; ++i)
        wrong += got[i] != ranks_sum * static_cast<float>((i + k + round) % 97);
      EXPECT(wrong == 0, "round ", round, " buffer ", k, " (", sizes[k], " floats): ", wrong, " wrong elements");
    }
  }
  c.reset();
  for (float* p : dev) CU(cudaFree(p));
  CU(cudaStreamDestroy(s));
  return g_failures != 0 ? 1 : 0;
}

int scenario_kill(const RankEnv& re) {
  FileStore store(re.store_dir);
  const int victim = re.world - 1;
  auto c = connect(re, store, [&](const ChunkEvent& e) {
    if (re.rank == victim && e.chunks_done >= 1) raise(SIGKILL);
  });
  const size_t n = size_t{3} << 20;
  float* d = nullptr;
  CU(cudaMalloc(&d, sizeof(float) * n));
  CU(cudaMemset(d, 0, sizeof(float) * n));
  CU(cudaDeviceSynchronize());
  const TimePoint t0 = Clock::now();
  try {
    c->allreduce_start(device_floats(d, n), OpId{7, 0}, nullptr)->wait(Clock::now() + std::chrono::seconds(20));
    EXPECT(false, "the all-reduce finished although rank ", victim, " was killed");
  } catch (const PeerFailed& e) {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::cerr << "rank " << re.rank << ": failed after " << s << " s: " << e.what() << "\n";
    EXPECT(e.peer() == victim, "blames peer ", e.peer(), ", not the killed rank ", victim, ": ", e.what());
    EXPECT(s <= 2.0, "failed only after ", s, " s");
  } catch (const CommError& e) {
    EXPECT(false, "not PeerFailed: ", e.what());
  }
  c.reset();
  CU(cudaFree(d));
  return g_failures != 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: comm_staging_gpu_test sums|kill W\n";
    return 2;
  }
  const std::string scenario = argv[1];
  if (std::getenv("RF_RANK")) {
    const RankEnv re = rank_env_from_environment();
    g_rank = re.rank;
    try {
      return scenario == "kill" ? scenario_kill(re) : scenario_sums(re);
    } catch (const std::exception& e) {
      std::cerr << "rank " << re.rank << ": unexpected error: " << e.what() << "\n";
      return 1;
    }
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("SKIPPED: no GPU: cudaGetDeviceCount found none (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 77;
  }
  LocalLaunch l;
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  l.program = len > 0 ? std::string(self, static_cast<size_t>(len)) : "/proc/self/exe";
  l.args = {argv[1], argv[2]};
  l.world = std::atoi(argv[2]);
  l.deadline = std::chrono::seconds(90);
  if (!std::getenv("UCX_LOG_LEVEL")) l.env.push_back({"UCX_LOG_LEVEL", "error"});
  if (!std::getenv("UCX_HANDLE_ERRORS")) l.env.push_back({"UCX_HANDLE_ERRORS", "none"});
  int rc = 0;
  for (const RankExit& x : run_local_ranks(l)) {
    const bool victim = scenario == "kill" && x.rank == l.world - 1;
    const bool ok = victim ? (WIFSIGNALED(x.status) && WTERMSIG(x.status) == SIGKILL && !x.killed_at_deadline) : x.ok();
    if (!ok) rc = 1;
    std::cerr << (ok ? "  ok   " : "  FAIL ") << x.describe() << "\n";
  }
  std::cerr << "comm_staging_gpu_test " << scenario << " W=" << l.world << ": " << (rc ? "FAILED" : "passed") << "\n";
  return rc;
}
