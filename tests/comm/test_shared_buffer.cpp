// SharedBuffer: memfd memory registered by address, found for any range inside it, and
// gone from the registry when freed or moved from.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>
#include <utility>

#include "comm/shared_buffer.h"

using namespace rf::comm;

TEST_CASE("shared buffer: zero-filled, registered, every inside range found") {
  SharedBuffer b(10000);
  REQUIRE(b.data() != nullptr);
  CHECK(b.bytes() == 10000);
  REQUIRE(b.shared());
  const char* p = b.as<char>();
  for (size_t i = 0; i < b.bytes(); ++i) REQUIRE(p[i] == 0);
  SharedRange r;
  REQUIRE(find_shared(p, 10000, &r));
  CHECK(r.offset == 0);
  CHECK(r.fd >= 0);
  CHECK(r.file_bytes >= 10000);
  REQUIRE(find_shared(p + 4000, 6000, &r));
  CHECK(r.offset == 4000);
  CHECK(find_shared(p + 10000, 0, nullptr));
  CHECK_FALSE(find_shared(p + 4000, 6001, nullptr));  // runs past the end
  CHECK_FALSE(find_shared(p - 1, 2, nullptr));
  int local = 0;
  CHECK_FALSE(find_shared(&local, sizeof(local), nullptr));
}

TEST_CASE("shared buffer: ids are unique, moves carry the registration, freeing removes it") {
  SharedRange r1, r2;
  SharedBuffer a(4096), b(4096);
  REQUIRE(find_shared(a.data(), 4096, &r1));
  REQUIRE(find_shared(b.data(), 4096, &r2));
  CHECK(r1.id != r2.id);
  void* pa = a.data();
  SharedBuffer c(std::move(a));
  CHECK(a.data() == nullptr);
  CHECK(c.data() == pa);
  REQUIRE(find_shared(pa, 4096, &r2));
  CHECK(r2.id == r1.id);
  std::memset(c.data(), 7, 4096);
  c = SharedBuffer();
  CHECK_FALSE(find_shared(pa, 1, nullptr));
  SharedBuffer empty(0);
  CHECK(empty.data() == nullptr);
  CHECK_FALSE(empty.shared());
}

TEST_CASE("shared buffer: every page is resident when the constructor returns (never faulted in a collective)") {
  const size_t bytes = (size_t{40} << 20) + 5;  // more than two 16 MiB populate calls
  SharedBuffer b(bytes);
  REQUIRE(b.shared());
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  REQUIRE(::mincore(b.data(), bytes, v.data()) == 0);
  size_t resident = 0;
  for (unsigned char c : v) resident += c & 1;
  CHECK(resident == v.size());
  const char* p = b.as<char>();
  for (size_t i = 0; i < bytes; i += 4093) REQUIRE(p[i] == 0);
}
