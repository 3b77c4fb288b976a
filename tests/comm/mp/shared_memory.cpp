// comm_mp_test: the shared-memory path: a peer buffer whose fd is reused, mismatched slots.
#include "tests/comm/mp/mp_support.h"

namespace rf::comm::mptest {
namespace {

// zc_refd: a peer's registered buffer is freed, and its fd number reused, between its
// `entered` word and our first mapping of it. Rank 1 enters zero-copy all-reduce 2 on a
// fresh 1 MiB buffer B, aborts, frees B and allocates a one-page SharedBuffer that gets
// B's old fd number. Rank 0 is held (its on_chunk, at the done phase of all-reduce 1)
// until then; in the same pump it goes on with all-reduce 2, sees rank 1's `entered`, and
// maps /proc/<pid 1>/fd/<fd>: now a one-page file, not B. It must fail that collective
// with an error naming rank 1 — never read past that file's end (SIGBUS). zc_refd_same:
// the new file is as large as B; rank 0 must fail too, and must not have cached (counted)
// a mapping of that other file as B's. Synchronised by the store and rank 1's own control
// segment, no sleeps.
const ShmControl* own_control_segment() {
  // This process has one communicator: its segment is the memfd named ringfence-comm.
  for (int fd = 0; fd < 4096; ++fd) {
    char link[256];
    const ssize_t n = readlink(rf::str("/proc/self/fd/", fd).c_str(), link, sizeof(link) - 1);
    if (n <= 0) continue;
    link[n] = 0;
    if (std::strstr(link, "memfd:ringfence-comm") == nullptr) continue;
    void* p = mmap(nullptr, sizeof(ShmControl), PROT_READ, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : static_cast<const ShmControl*>(p);
  }
  return nullptr;
}

int scenario_zc_refd(bool same_size) {
  Env e = make_env();
  const int r = e.re.rank;
  EXPECT(e.re.world == 2 && all_registered(), "zc_refd runs as zc_refd_reg 2");
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(5000);
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  if (r == 0) {
    o.on_chunk = [&](const ChunkEvent& ev) {
      if (ev.step == 1 && ev.chunks_done == 3) e.store->wait_get("swapped", std::chrono::seconds(20));
    };
  }
  UcxCommunicator c(e.ctx, *e.store, r, 2, 4, o);
  SharedBuffer a(size_t{1} << 20), b(size_t{1} << 20);
  const size_t n = a.bytes() / sizeof(float);
  std::fill(a.as<float>(), a.as<float>() + n, 1.0f);
  std::fill(b.as<float>(), b.as<float>() + n, 2.0f);
  const uint64_t maps = peer_buffer_maps_made();  // rank 0 maps rank 1's A, and only A
  Buffer whole_a{a.data(), n, DType::f32}, whole_b{b.data(), n, DType::f32};
  whole_a.registered = &a;
  whole_b.registered = &b;
  auto w1 = c.allreduce_start(whole_a, OpId{1, 0});
  if (r == 0) {
    auto w2 = c.allreduce_start(whole_b, OpId{2, 0});
    w1->wait();
    try {
      w2->wait();
      EXPECT(false, "all-reduce 2 completed although rank 1 aborted and freed its buffer");
    } catch (const CommError& err) {
      // The mapping fails (never SIGBUS); before blaming rank 1 for it, rank 0 reads what
      // UCX holds and finds rank 1's farewell, sent before it released B: it aborted, so
      // rank 0 fails as aborted, relayed by rank 1 (a failed rank 1 would be named).
      EXPECT(dynamic_cast<const Aborted*>(&err) != nullptr &&
                 std::string(err.what()).find("rank 1 leaves all-reduce 2; relayed by rank 1") != std::string::npos,
             "not rank 1's relayed abort: ", err.what());
      std::cerr << "rank 0 failed as it should: " << err.what() << "\n";
    }
    EXPECT(peer_buffer_maps_made() == maps + 1, "mapped (and cached) another file as rank 1's buffer B");
    e.store->set("rank0_done", {1});
    return g_failures ? 1 : 0;
  }
  w1->wait();
  const ShmControl* seg = own_control_segment();
  EXPECT(seg != nullptr, "cannot find this rank's control segment");
  if (!seg) {
    e.store->set("swapped", {1});
    return 1;
  }
  SharedRange old;
  EXPECT(b.range_of(b.data(), b.bytes(), &old), "buffer B is not shared");
  auto w2 = c.allreduce_start(whole_b, OpId{2, 0});
  // Entered all-reduce 2 (rank 0 is held, so it cannot have gone further).
  const TimePoint until = rf::Clock::now() + std::chrono::seconds(20);
  while (seg->entered.load(std::memory_order_acquire) >> 1 < 2 && rf::Clock::now() < until) std::this_thread::yield();
  EXPECT(seg->entered.load() >> 1 == 2, "rank 1 never entered all-reduce 2");
  c.abort("test: rank 1 leaves all-reduce 2");
  try {
    w2->wait();
  } catch (const CommError&) {
  }
  // B's fd is closed, and its number reused by a new buffer (the lowest free fd).
  std::vector<SharedBuffer> pages;
  SharedRange now;
  const size_t reuse_bytes = same_size ? b.bytes() : 4096;
  b = SharedBuffer();
  for (int i = 0; i < 64; ++i) {
    pages.emplace_back(reuse_bytes);
    if (pages.back().range_of(pages.back().data(), reuse_bytes, &now) && now.fd == old.fd) break;
  }
  EXPECT(now.fd == old.fd, "fd ", old.fd, " was not reused");
  e.store->set("swapped", {1});
  e.store->wait_get("rank0_done", std::chrono::seconds(20));  // our /proc entry must stay
  munmap(const_cast<ShmControl*>(seg), sizeof(ShmControl));
  return g_failures ? 1 : 0;
}

// slot_mismatch: rank 1 uses other shm_slot_bytes (a misconfiguration): its control
// segment has another size, so the connect-time probe must switch the shared-memory path
// off on every rank alike (all or none), and all-reduces of every size still sum right.
int scenario_slot_mismatch() {
  Env e = make_env();
  UcxOptions o = base_options();
  if (e.re.rank == 1) o.shm_slot_bytes = 3 * o.shm_slot_bytes;
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 6, o);
  EXPECT(!c.shm_path(), "shared-memory path on although rank 1 uses other slots");
  TestBuf<float> f(size_t{1} << 16);
  uint64_t step = 0;
  for (size_t n : {size_t{5}, size_t{1500}, size_t{1} << 16}) check_allreduce(c, f, n, DType::f32, step++);
  EXPECT(c.slot_allreduces() == 0 && c.zero_copy_allreduces() == 0, "shared-memory all-reduces with the path off");
  c.barrier(OpId{step, 0});
  return g_failures ? 1 : 0;
}

}  // namespace

std::vector<NamedScenario> shared_memory_scenarios() {
  return {{"zc_refd", [] { return scenario_zc_refd(false); }},
          {"zc_refd_same", [] { return scenario_zc_refd(true); }},
          {"slot_mismatch", scenario_slot_mismatch}};
}

}  // namespace rf::comm::mptest
