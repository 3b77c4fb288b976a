#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/populate.h"

namespace {

struct Call {
  uintptr_t addr;
  size_t len;
  int advice;
};
std::vector<Call> g_calls;
int g_fail_every = 0;  // 0: never; k: every k-th call (1-based) fails with EINVAL

int recording_madvise(void* addr, size_t len, int advice) {
  g_calls.push_back({reinterpret_cast<uintptr_t>(addr), len, advice});
  return 0;
}

int failing_madvise(void* addr, size_t len, int advice) {
  g_calls.push_back({reinterpret_cast<uintptr_t>(addr), len, advice});
  if (g_fail_every > 0 && g_calls.size() % static_cast<size_t>(g_fail_every) == 0) {
    errno = EINVAL;
    return -1;
  }
  return ::madvise(addr, len, advice);
}

size_t page_size() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

// A fresh private anonymous mapping: no page resident until touched.
struct Fresh {
  explicit Fresh(size_t n) : bytes(n) {
    p = static_cast<unsigned char*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
  }
  ~Fresh() { ::munmap(p, bytes); }
  size_t resident_pages() const {
    std::vector<unsigned char> v((bytes + page_size() - 1) / page_size());
    REQUIRE(::mincore(p, bytes, v.data()) == 0);
    size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n;
  }
  unsigned char* p;
  size_t bytes;
};

}  // namespace

TEST_CASE("populate_pages covers exactly the pages of the range, in calls of at most one slice") {
  const size_t page = page_size();
  g_calls.clear();
  // No page is touched (the recorder does not call madvise): the addresses need not be mapped.
  const uintptr_t base = uintptr_t{1} << 30;
  auto* data = reinterpret_cast<void*>(base + 100);                   // inside the first page
  const size_t bytes = 10 * page;                                     // ends 100 bytes into page 10
  const rf::PopulateStats st = rf::populate_pages(data, bytes, 3 * page + 123, recording_madvise);
  // Pages 0..10 (11 pages) in slices of 3 pages (the slice rounded down to whole pages).
  REQUIRE(g_calls.size() == 4);
  CHECK(st.calls == 4);
  CHECK(st.fallback_bytes == 0);
  uintptr_t next = base;
  for (const Call& c : g_calls) {
    CHECK(c.addr == next);
    CHECK(c.addr % page == 0);
    CHECK(c.len <= 3 * page);
    CHECK(c.len % page == 0);
    CHECK(c.advice == MADV_POPULATE_WRITE);
    next = c.addr + c.len;
  }
  CHECK(g_calls[0].len == 3 * page);
  CHECK(g_calls[3].len == 2 * page);
  CHECK(next == base + 11 * page);

  SUBCASE("a range inside one page is one call over that page") {
    g_calls.clear();
    rf::populate_pages(reinterpret_cast<void*>(base + 5 * page + 7), 10, rf::kPopulateSliceBytes, recording_madvise);
    REQUIRE(g_calls.size() == 1);
    CHECK(g_calls[0].addr == base + 5 * page);
    CHECK(g_calls[0].len == page);
  }
  SUBCASE("a slice below one page is one page") {
    g_calls.clear();
    rf::populate_pages(reinterpret_cast<void*>(base), 3 * page, 1, recording_madvise);
    REQUIRE(g_calls.size() == 3);
    for (const Call& c : g_calls) CHECK(c.len == page);
  }
  SUBCASE("an empty range or a null pointer makes no call") {
    g_calls.clear();
    CHECK(rf::populate_pages(reinterpret_cast<void*>(base), 0, page, recording_madvise).calls == 0);
    CHECK(rf::populate_pages(nullptr, 5 * page, page, recording_madvise).calls == 0);
    CHECK(g_calls.empty());
  }
  SUBCASE("the default slice is 16 MiB: a 100 MiB range is 7 calls, none longer") {
    g_calls.clear();
    rf::populate_pages(reinterpret_cast<void*>(base), size_t{100} << 20, rf::kPopulateSliceBytes, recording_madvise);
    CHECK(g_calls.size() == 7);
    for (const Call& c : g_calls) CHECK(c.len <= (size_t{16} << 20));
  }
}

TEST_CASE("populate_pages makes a fresh mapping resident and leaves it zero") {
  const size_t page = page_size();
  Fresh m(64 * page);
  REQUIRE(m.resident_pages() == 0);
  g_fail_every = 0;
  g_calls.clear();
  const rf::PopulateStats st = rf::populate_pages(m.p, m.bytes, 16 * page, failing_madvise);
  CHECK(st.calls == 4);
  CHECK(st.fallback_bytes == 0);
  CHECK(m.resident_pages() == 64);
  for (size_t i = 0; i < m.bytes; i += 61) CHECK(m.p[i] == 0);
  // The system madvise (the default) does the same.
  Fresh m2(40 * page);
  CHECK(rf::populate_pages(m2.p, m2.bytes).fallback_bytes == 0);
  CHECK(m2.resident_pages() == 40);
}

TEST_CASE("where madvise fails, the slice's pages are touched instead and keep their bytes") {
  const size_t page = page_size();
  Fresh m(40 * page);
  // Some bytes written before (on pages of every slice, including the first byte of a page:
  // the one the fallback touches); the rest of the pages stay untouched.
  for (size_t pg : {0, 9, 10, 21, 39}) {
    m.p[pg * page] = static_cast<unsigned char>(pg + 1);
    m.p[pg * page + 17] = static_cast<unsigned char>(0xA0 + pg);
  }
  REQUIRE(m.resident_pages() == 5);
  g_fail_every = 2;  // the 2nd and 4th of four 10-page slices fail
  g_calls.clear();
  const rf::PopulateStats st = rf::populate_pages(m.p, m.bytes, 10 * page, failing_madvise);
  g_fail_every = 0;
  CHECK(st.calls == 4);
  CHECK(st.fallback_bytes == 20 * page);
  CHECK(m.resident_pages() == 40);
  for (size_t pg = 0; pg < 40; ++pg) {
    const bool written = pg == 0 || pg == 9 || pg == 10 || pg == 21 || pg == 39;
    CHECK(m.p[pg * page] == (written ? pg + 1 : 0));
    CHECK(m.p[pg * page + 17] == (written ? 0xA0 + pg : 0));
  }
  SUBCASE("an unaligned range falling back: its edge pages are resident, the pages beyond are not") {
    Fresh m3(8 * page);
    g_fail_every = 1;
    g_calls.clear();
    rf::populate_pages(m3.p + 2 * page + 100, 3 * page - 200, 2 * page, failing_madvise);  // pages 2..4
    g_fail_every = 0;
    CHECK(m3.resident_pages() == 3);
    std::vector<unsigned char> v(8);
    REQUIRE(::mincore(m3.p, 8 * page, v.data()) == 0);
    for (size_t pg = 0; pg < 8; ++pg) CHECK((v[pg] & 1) == (pg >= 2 && pg <= 4 ? 1 : 0));
  }
  SUBCASE("every call failing (a kernel without MADV_POPULATE_WRITE) still makes it all resident") {
    Fresh all(12 * page);
    g_fail_every = 1;
    g_calls.clear();
    const rf::PopulateStats s2 = rf::populate_pages(all.p, all.bytes, 4 * page, failing_madvise);
    g_fail_every = 0;
    CHECK(s2.fallback_bytes == 12 * page);
    CHECK(all.resident_pages() == 12);
  }
}

namespace {

// Whether each page of [p, p + n) has a page-table entry (/proc/self/pagemap, bit 63). Not
// mincore: for a file mapping that says whether the file's page is in memory, not whether
// this mapping maps it.
std::vector<bool> present(const void* p, size_t n) {
  const size_t page = page_size();
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::vector<uint64_t> e((n + page - 1) / page);
  const auto off = static_cast<off_t>(reinterpret_cast<uintptr_t>(p) / page * sizeof(uint64_t));
  const ssize_t got = ::pread(fd, e.data(), e.size() * sizeof(uint64_t), off);
  ::close(fd);
  REQUIRE(got == static_cast<ssize_t>(e.size() * sizeof(uint64_t)));
  std::vector<bool> v;
  for (uint64_t x : e) v.push_back((x >> 63) & 1);
  return v;
}
size_t count_present(const void* p, size_t n) {
  size_t k = 0;
  for (bool b : present(p, n)) k += b;
  return k;
}

// From now on failing_madvise records its calls and fails every `fail_every`-th (0: none).
void record_calls(int fail_every) {
  g_fail_every = fail_every;
  g_calls.clear();
}

// A peer's buffer as comm maps it: a memfd whose pages its owner wrote (resident), mapped
// here again read-only, shared — no page of this mapping has an entry until populated.
// With `holes`, the owner wrote the even pages only: the odd ones are not in memory, so a
// read fault elsewhere cannot map them too (the kernel's fault-around maps a faulting
// page's resident neighbours), only a read of their own.
struct PeerView {
  explicit PeerView(size_t n, bool holes = false) : bytes(n) {
    const int fd = ::memfd_create("test_populate", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(n)) == 0);
    owner = static_cast<unsigned char*>(::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    REQUIRE(owner != MAP_FAILED);
    for (size_t i = 0; i < n; ++i)
      if (!holes || (i / page_size()) % 2 == 0) owner[i] = static_cast<unsigned char>(i * 7 + 3);
    view = static_cast<const unsigned char*>(::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0));
    REQUIRE(view != MAP_FAILED);
    ::close(fd);
  }
  ~PeerView() {
    ::munmap(owner, bytes);
    ::munmap(const_cast<unsigned char*>(view), bytes);
  }
  size_t bytes;
  unsigned char* owner;
  const unsigned char* view;
};

}  // namespace

TEST_CASE("populate_pages_read maps every page of a read-only view of another's memory, in slices, reading only") {
  const size_t page = page_size();
  PeerView m(40 * page);
  REQUIRE(count_present(m.view, m.bytes) == 0);
  record_calls(0);
  const rf::PopulateStats st = rf::populate_pages_read(m.view, m.bytes, 16 * page, failing_madvise);
  CHECK(st.calls == 3);
  CHECK(st.fallback_bytes == 0);
  REQUIRE(g_calls.size() == 3);
  for (const Call& c : g_calls) {
    CHECK(c.advice == MADV_POPULATE_READ);
    CHECK(c.len <= 16 * page);
  }
  CHECK(count_present(m.view, m.bytes) == 40);
  for (size_t i = 0; i < m.bytes; i += 61) CHECK(m.view[i] == static_cast<unsigned char>(i * 7 + 3));
  // The system madvise (the default) does the same.
  PeerView m2(24 * page);
  CHECK(rf::populate_pages_read(m2.view, m2.bytes).fallback_bytes == 0);
  CHECK(count_present(m2.view, m2.bytes) == 24);
}

TEST_CASE("where madvise fails, populate_pages_read reads a byte of each page of the range instead") {
  const size_t page = page_size();
  PeerView m(30 * page, true);
  record_calls(1);  // every call fails: a kernel without MADV_POPULATE_READ
  const rf::PopulateStats st = rf::populate_pages_read(m.view, m.bytes, 8 * page, failing_madvise);
  CHECK(st.calls == 4);
  CHECK(st.fallback_bytes == 30 * page);
  CHECK(count_present(m.view, m.bytes) == 30);
  // An unaligned range (pages 1..3 of a fresh view, 1 and 3 holes): its edge pages too.
  // Not "none beyond": fault-around maps resident neighbours.
  PeerView m3(8 * page, true);
  record_calls(1);
  rf::populate_pages_read(m3.view + page + 100, 3 * page - 200, 2 * page, failing_madvise);
  record_calls(0);
  const std::vector<bool> v = present(m3.view, m3.bytes);
  for (size_t pg = 1; pg <= 3; ++pg) CHECK(v[pg]);
  for (size_t i = 0; i < m.bytes; i += 97)
    CHECK(m.view[i] == ((i / page) % 2 == 0 ? static_cast<unsigned char>(i * 7 + 3) : 0));
}
