// nccl_regroup_bench: how long the NCCL backend takes to form the next generation when one
// rank left — ncclCommShrink of the previous communicator against a fresh
// ncclCommInitRankConfig from a new unique id (comm/nccl/regroup.h). One thread per GPU,
// W = every GPU of the machine (NCCL refuses two ranks on one GPU): on fewer than two
// GPUs it prints why it cannot measure and exits 77.
//
//   nccl_regroup_bench [--reps N]   (default 5)
//
// Each repetition: generation g formed fresh with W ranks; then the W - 1 first ranks form g + 1 by shrink (their member list is g's without the last),
// and, separately, g + 2 fresh (no previous). Printed: the median of each, in ms.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/bootstrap/file_store.h"
#include "comm/nccl/nccl_communicator.h"

using namespace rf::comm;

namespace {

using Comms = std::vector<std::shared_ptr<Communicator>>;

// Forms generation `g` on ranks [0, members.size()) in parallel threads; returns the
// slowest rank's time in ms.
double form(FileStore& store, uint64_t g, const std::vector<std::string>& members, const Comms& previous, Comms& out) {
  const int w = static_cast<int>(members.size());
  out.assign(static_cast<size_t>(w), nullptr);
  std::vector<double> ms(static_cast<size_t>(w), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < w; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      CommOptions o;
      o.store = &store;
      o.rank = r;
      o.world = w;
      o.generation = g;
      o.device = Device::cuda;
      o.device_index = r;
      o.members = members;
      if (!previous.empty()) {  // the plan's word: shrink the previous generation's
        o.previous = previous[static_cast<size_t>(r)];
        o.regroup = CommRegroup{CommRegroup::Kind::shrink, o.previous->generation()};
      }
      const auto t0 = std::chrono::steady_clock::now();
      out[static_cast<size_t>(r)] = nccl::make_nccl_communicator(o);
      const auto took = std::chrono::steady_clock::now() - t0;
      ms[static_cast<size_t>(r)] = std::chrono::duration<double, std::milli>(took).count();
    });
  }
  for (auto& t : threads) t.join();
  return *std::max_element(ms.begin(), ms.end());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::atoi(argv[i + 1]));
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus < 2) {
    std::printf("nccl_regroup_bench: cannot measure: %d GPU(s) here; shrinking needs at least 2 ranks, and NCCL "
                "refuses two ranks on one GPU\n", gpus);
    return 77;
  }
  nccl::prepare_nccl();
  std::string dir = (std::filesystem::temp_directory_path() / "rf-nccl-bench-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  FileStore store(dir);
  std::vector<std::string> all;
  for (int r = 0; r < gpus; ++r) {
    char name[16];
    std::snprintf(name, sizeof name, "w%d", r);
    all.emplace_back(name);
  }
  const std::vector<std::string> left(all.begin(), all.end() - 1);
  std::vector<double> fresh_full, shrink, fresh_less;
  for (int k = 0; k < reps; ++k) {
    const uint64_t g = static_cast<uint64_t>(k) * 3;
    Comms full, shrunk, fresh;
    fresh_full.push_back(form(store, g, all, {}, full));
    Comms prev(full.begin(), full.end() - 1);
    shrink.push_back(form(store, g + 1, left, prev, shrunk));
    fresh_less.push_back(form(store, g + 2, left, {}, fresh));
  }
  std::printf("# nccl_regroup_bench: W = %d GPUs, %d reps, median ms (slowest rank)\n", gpus, reps);
  std::printf("%-28s %10s\n", "formation", "ms");
  std::printf("fresh init, W = %-12d %10.1f\n", gpus, median(fresh_full));
  std::printf("shrink to W = %-14d %10.1f\n", gpus - 1, median(shrink));
  std::printf("fresh init, W = %-12d %10.1f\n", gpus - 1, median(fresh_less));
  std::filesystem::remove_all(dir);
  return 0;
}
