// The NCCL backend's staging pool rules (comm/nccl/staging.h), without CUDA.
#include <doctest/doctest.h>

#include <initializer_list>
#include <vector>

#include "comm/nccl/staging.h"

using namespace rf::comm::nccl;

namespace {
std::vector<StagingSlot> slots(std::initializer_list<size_t> sizes) {
  std::vector<StagingSlot> out;
  for (size_t b : sizes) out.push_back(StagingSlot{nullptr, nullptr, b, 0});
  return out;
}
}  // namespace

TEST_CASE("staging: a new slot is 4 KiB doubled until it fits") {
  CHECK(staging_slot_bytes(0) == 4096);
  CHECK(staging_slot_bytes(1) == 4096);
  CHECK(staging_slot_bytes(4096) == 4096);
  CHECK(staging_slot_bytes(4097) == 8192);
  CHECK(staging_slot_bytes((size_t{1} << 20) + 1) == (size_t{1} << 21));
}

TEST_CASE("staging: the smallest free slot that fits serves a request, none when none fits") {
  CHECK(pick_staging_slot(slots({}), 1) == -1);
  CHECK(pick_staging_slot(slots({4096, 65536, 8192}), 5000) == 2);
  CHECK(pick_staging_slot(slots({4096, 65536, 8192}), 4096) == 0);
  CHECK(pick_staging_slot(slots({4096, 65536, 8192}), 65536) == 1);
  CHECK(pick_staging_slot(slots({4096, 65536, 8192}), 65537) == -1);
  CHECK(pick_staging_slot(slots({8192, 8192}), 10) == 0);  // ties: the first
}
