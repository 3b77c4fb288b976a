#include <doctest/doctest.h>

#include <vector>

#include "core/free_lists.h"

TEST_CASE("free lists: sizes round to 64 bytes below 64 KiB and to 4 KiB above") {
  using rf::FreeLists;
  CHECK(FreeLists::round(0) == 64);
  CHECK(FreeLists::round(1) == 64);
  CHECK(FreeLists::round(65) == 128);
  CHECK(FreeLists::round((64u << 10) - 1) == (64u << 10));
  CHECK(FreeLists::round((64u << 10) + 1) == (64u << 10) + 4096);
}

TEST_CASE("free lists: a freed block is handed out again for its size only, and the statistics follow") {
  rf::FreeLists lists;
  int a = 0, b = 0;
  CHECK(lists.take(128) == nullptr);
  lists.note_fresh(128);
  lists.note_fresh(256);
  lists.put(&a, 128);
  lists.put(&b, 256);
  CHECK(lists.stats().cached_bytes == 384);
  CHECK(lists.stats().live_bytes == 0);
  CHECK(lists.take(64) == nullptr);
  CHECK(lists.take(256) == &b);
  CHECK(lists.stats().reused_blocks == 1);
  CHECK(lists.stats().live_bytes == 256);
  std::vector<void*> freed;
  lists.drain([&](void* p) { freed.push_back(p); });
  CHECK(freed == std::vector<void*>{&a});
  CHECK(lists.stats().cached_bytes == 0);
  CHECK(lists.take(128) == nullptr);
  CHECK(lists.stats().fresh_blocks == 2);
}
