// Tensor basics, views, the caching allocator, devices and the runtime registry.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "base/error.h"
#include "core/allocator.h"
#include "core/device_runtime.h"
#include "core/ops.h"
#include "kernels/op_table.h"

using namespace rf;

TEST_CASE("shapes: up to 4-D, numel, clear errors") {
  CHECK(Shape{2, 3, 4, 5}.numel() == 120);
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{2, 3}.str() == "[2, 3]");
  CHECK_THROWS_AS((Shape{1, 2, 3, 4, 5}), InvalidInput);
  CHECK_THROWS_AS((Shape{2, -1}), InvalidInput);
  CHECK_THROWS_AS(Tensor::from({2, 2}, std::vector<float>{1, 2, 3}), InvalidInput);
}

TEST_CASE("reshape and flatten are views sharing storage") {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  Tensor f = flatten(x);
  CHECK(f.shape() == Shape{2, 48});
  CHECK(f.data() == x.data());
  x.data()[5] = 3.0f;
  CHECK(f.data()[5] == 3.0f);
  CHECK_THROWS_AS(reshape(x, {5, 5}), InvalidInput);
}

TEST_CASE("shape errors name the op and both shapes") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  try {
    matmul(a, b);
    FAIL("expected an error");
  } catch (const InvalidInput& e) {
    const std::string m = e.what();
    CHECK(m.find("matmul") != std::string::npos);
    CHECK(m.find("[2, 3]") != std::string::npos);
    CHECK(m.find("[4, 5]") != std::string::npos);
  }
  std::vector<int32_t> bad{0, 12};
  CHECK_THROWS_AS(cross_entropy(Tensor::zeros({2, 10}), bad), InvalidInput);
  std::vector<int32_t> short_labels{0};
  CHECK_THROWS_AS(cross_entropy(Tensor::zeros({2, 10}), short_labels), InvalidInput);
}

TEST_CASE("the caching allocator reuses freed blocks: a second step faults nothing new") {
  auto& alloc = CachingAllocator::host();
  auto step = [] {
    Tensor w = Tensor::full({64, 32}, 0.01f);
    w.set_requires_grad(true);
    Tensor x = Tensor::full({16, 32}, 1.0f);
    std::vector<int32_t> labels(16, 3);
    cross_entropy(relu(matmul(x, w, false, true)), labels).backward();
  };
  step();
  const size_t fresh = alloc.stats().fresh_blocks;
  for (int i = 0; i < 5; ++i) step();
  CHECK(alloc.stats().fresh_blocks == fresh);
  CHECK(alloc.stats().reused_blocks > 0);
}

namespace {
size_t resident_pages(const void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
  std::vector<unsigned char> v((e - a) / page);
  REQUIRE(::mincore(reinterpret_cast<void*>(a), e - a, v.data()) == 0);
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}
}  // namespace

TEST_CASE("the caching allocator hands out a fresh big block resident (a replacement's start-up)") {
  // 64 MiB: above glibc's largest mmap threshold, so the block is a fresh mapping whose
  // pages no one has touched; the allocator makes them resident before handing it out.
  auto& alloc = CachingAllocator::host();
  const size_t bytes = (size_t{64} << 20) + 123;
  void* p = alloc.allocate(bytes);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  CHECK(resident_pages(p, bytes) == (bytes + page - 1) / page);
  alloc.release(p, bytes);
  alloc.empty_cache();
}

TEST_CASE("runtime: the CPU always has one; a device without one is named in the error") {
  CHECK(std::string(ops_for(Device::CPU, "matmul").device) == "cpu");
  CHECK(runtime(Device::CPU).device() == Device::CPU);
  // No machine here has sixteen GPUs: cuda:15 has no runtime in any build.
  try {
    ops_for(Device::cuda(15), "matmul");
    FAIL("expected rf::Error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("cuda:15") != std::string::npos);
    CHECK(m.find("matmul") != std::string::npos);
  }
  CHECK_THROWS_AS(Tensor::empty({2}, Device::cuda(15)), Error);
}

TEST_CASE("device names parse and print") {
  CHECK(device_name(Device::CPU) == "cpu");
  CHECK(device_name(Device::cuda(2)) == "cuda:2");
  CHECK(parse_device("cpu") == Device::CPU);
  CHECK(parse_device("cuda") == Device::CUDA);
  CHECK(parse_device("cuda:7") == Device::cuda(7));
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU"}) {
    try {
      parse_device(bad);
      FAIL("expected InvalidInput for '" << bad << "'");
    } catch (const InvalidInput& e) {
      CHECK(std::string(e.what()).find(std::string("'") + bad + "'") != std::string::npos);
    }
  }
}
