// SharedBuffer: memfd memory, the host kind of RegisteredMemory; where every range inside it
// lies in the memfd (and nothing outside it); moves carry it; a peer's read-only mapping.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include <utility>

#include "comm/shm/shared_buffer.h"
#include "comm/shm/shm_mappings.h"

using namespace rf::comm;

TEST_CASE("shared buffer: zero-filled host memory, every inside range found, nothing outside") {
  SharedBuffer b(10000);
  REQUIRE(b.data() != nullptr);
  CHECK(b.bytes() == 10000);
  CHECK(b.device() == Device::host);
  REQUIRE(b.shared());
  const char* p = b.as<char>();
  for (size_t i = 0; i < b.bytes(); ++i) REQUIRE(p[i] == 0);
  SharedRange r;
  REQUIRE(b.range_of(p, 10000, &r));
  CHECK(r.offset == 0);
  CHECK(r.fd >= 0);
  CHECK(r.file_bytes >= 10000);
  REQUIRE(b.range_of(p + 4000, 6000, &r));
  CHECK(r.offset == 4000);
  CHECK(b.range_of(p + 10000, 0, nullptr));
  CHECK(b.contains(p + 4000, 6000));
  CHECK_FALSE(b.range_of(p + 4000, 6001, nullptr));  // runs past the end
  CHECK_FALSE(b.contains(p + 4000, 6001));
  CHECK_FALSE(b.range_of(p - 1, 2, nullptr));
  CHECK_FALSE(b.contains(p - 1, 2));
  int local = 0;
  CHECK_FALSE(b.range_of(&local, sizeof(local), nullptr));
  // Another buffer's range is not this one's.
  SharedBuffer other(4096);
  CHECK_FALSE(b.range_of(other.data(), 1, nullptr));
  CHECK_FALSE(b.contains(other.data(), 1));
}

TEST_CASE("shared buffer: ids are unique, moves carry them, a moved-from or empty buffer holds nothing") {
  SharedRange r1, r2;
  SharedBuffer a(4096), b(4096);
  REQUIRE(a.range_of(a.data(), 4096, &r1));
  REQUIRE(b.range_of(b.data(), 4096, &r2));
  CHECK(r1.id != r2.id);
  CHECK(r1.fd != r2.fd);
  void* pa = a.data();
  SharedBuffer c(std::move(a));
  CHECK(a.data() == nullptr);
  CHECK_FALSE(a.shared());
  CHECK_FALSE(a.range_of(pa, 1, nullptr));
  CHECK(c.data() == pa);
  REQUIRE(c.range_of(pa, 4096, &r2));
  CHECK(r2.id == r1.id);
  CHECK(r2.fd == r1.fd);
  std::memset(c.data(), 7, 4096);
  c = SharedBuffer();
  CHECK_FALSE(c.range_of(pa, 1, nullptr));
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

TEST_CASE("shared buffer: a peer's mapping (map_remote_fd) has every page mapped when it returns, its bytes the owner's") {
  const size_t bytes = (size_t{40} << 20) + 5;  // more than two 16 MiB populate calls
  SharedBuffer b(bytes);
  REQUIRE(b.shared());
  auto* w = b.as<unsigned char>();
  for (size_t i = 0; i < bytes; i += 4093) w[i] = static_cast<unsigned char>(i % 251 + 1);
  SharedRange r;
  REQUIRE(b.range_of(b.data(), bytes, &r));
  std::string why;
  const auto* p = static_cast<const unsigned char*>(map_remote_fd(::getpid(), r.fd, bytes, &why));
  REQUIRE_MESSAGE(p != nullptr, why);
  // Page-table entries present (/proc/self/pagemap bit 63): mincore would only say that the
  // memfd's pages are in memory, which the owner made them.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<uint64_t> e((bytes + page - 1) / page);
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const auto off = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / page * sizeof(uint64_t));
  const ssize_t got = ::pread(fd, e.data(), e.size() * sizeof(uint64_t), off);
  ::close(fd);
  REQUIRE(got == static_cast<ssize_t>(e.size() * sizeof(uint64_t)));
  size_t present = 0;
  for (uint64_t x : e) present += (x >> 63) & 1;
  CHECK(present == e.size());
  for (size_t i = 0; i < bytes; i += 4093) REQUIRE(p[i] == static_cast<unsigned char>(i % 251 + 1));
  ::munmap(const_cast<unsigned char*>(p), bytes);
}
