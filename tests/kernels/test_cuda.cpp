// The CUDA op table and runtime on a GPU (label gpu; skipped, exit 77, without one):
// every entry against the reference table (oracle_checks.h, device memory through the
// CUDA runtime), every entry twice bit for bit, and the runtime's copies, fences, counted
// waits and caching allocator.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "kernels/cuda/table.h"
#include "tests/kernels/oracle_checks.h"
#include "tests/kernels/runtime_memory.h"

namespace {

using namespace rf;
using namespace rf::kernels;
using namespace rf::kernels::oracle;

}  // namespace

TEST_CASE("oracle: every entry of the cuda op table matches the reference on random inputs") {
  DeviceRuntime& rt = runtime(Device::CUDA, "oracle");
  REQUIRE(std::string(rt.ops().device) == "cuda");
  const uint64_t seed = announce_seed("op-table oracle (cuda)");
  RuntimeMemory memory(rt);
  check_every_entry({&cuda_table(), &memory}, seed);
}

TEST_CASE("determinism: every entry of the cuda op table, run twice on the same inputs, gives the same bits") {
  const uint64_t seed = announce_seed("op-table determinism (cuda)");
  RuntimeMemory memory(runtime(Device::CUDA, "determinism"));
  check_every_entry({&cuda_table(), &memory, /*twice=*/true}, seed);
}

TEST_CASE("runtime: cuda copies, fences, counted waits and the caching allocator") {
  DeviceRuntime& rt = runtime(Device::CUDA, "runtime test");
  CHECK(rt.device() == Device::CUDA);
  const SyncCounts before = rt.sync_counts();
  // A write larger than the staging slots, its source changed right after write returns.
  const size_t n = (size_t{3} << 20) / sizeof(float) + 17;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.5f;
  DeviceAllocator& a = rt.allocator();
  auto* d = static_cast<float*>(a.allocate(sizeof(float) * n));
  rt.write(d, host.data(), sizeof(float) * n);
  const std::vector<float> expected = host;
  std::fill(host.begin(), host.end(), -1.0f);
  std::vector<float> back(n, 0.0f);
  rt.read(back.data(), d, sizeof(float) * n);
  CHECK(std::memcmp(back.data(), expected.data(), sizeof(float) * n) == 0);
  CHECK(rt.sync_counts().reads == before.reads + 1);

  // read_async into pinned staging, completed by a fence.
  auto* pinned = static_cast<float*>(rt.host_staging(sizeof(float) * 4));
  rt.ops().fill(rt.exec(), 4, 2.5f, d);
  rt.read_async(pinned, d, sizeof(float) * 4);
  Fence f;
  rt.record(f);
  rt.wait(f);
  CHECK(f.serial == 1);
  for (int i = 0; i < 4; ++i) CHECK(pinned[i] == 2.5f);
  rt.free_host_staging(pinned, sizeof(float) * 4);
  rt.synchronize();
  const SyncCounts after = rt.sync_counts();
  CHECK(after.fence_waits == before.fence_waits + 1);
  CHECK(after.synchronize == before.synchronize + 1);

  // A released block is reused for the next request of its size.
  a.release(d, sizeof(float) * n);
  const DeviceAllocator::Stats s0 = a.stats();
  void* again = a.allocate(sizeof(float) * n);
  CHECK(again == d);
  CHECK(a.stats().reused_blocks == s0.reused_blocks + 1);
  CHECK(a.stats().fresh_blocks == s0.fresh_blocks);
  a.release(again, sizeof(float) * n);
}
