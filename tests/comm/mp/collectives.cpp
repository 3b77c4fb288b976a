// comm_mp_test: every collective and its sums, blobs, destruction in flight, generations, mismatched tags.
#include "tests/comm/mp/mp_support.h"

namespace rf::comm::mptest {
namespace {

int scenario_allreduce(bool large) {
  Env e = make_env();
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 3, base_options());
  const int W = e.re.world;
  std::vector<size_t> counts;
  if (!large) {
    counts = {0, 1, 2, 3, 5, 7, 8, 13, 31, 64, 127, 1000, 4099, 16411, 65537, 262147};
    if (W <= 4) counts.push_back((size_t{1} << 20) + 3);
  } else {
    // 64 MiB of float at W = 2 (and 16 MiB + a prime remainder), big only for small W.
    // 1M + 3 floats (4 MiB) stays under the single-copy size cap (8 MiB at W = 2 on a
    // 2-core machine), the others take the FIFOs there: both paths in one communicator.
    counts = {(size_t{1} << 20) + 3, (size_t{4} << 20) + 7, size_t{16} << 20};
  }
  size_t maxc = 0;
  for (size_t n : counts) maxc = std::max(maxc, n);
  TestBuf<float> f(maxc);
  TestBuf<double> d(maxc);
  TestBuf<int64_t> i64(maxc);
  TestBuf<uint64_t> u64(maxc);
  uint64_t step = 0;
  for (size_t n : counts) {
    check_allreduce(c, f, n, DType::f32, step++);
    if (!large || n < (size_t{8} << 20)) {
      check_allreduce(c, d, n, DType::f64, step++);
      check_allreduce(c, i64, n, DType::i64, step++);
      check_allreduce(c, u64, n, DType::u64, step++);
    }
  }
  // Several outstanding all-reduces (gradient buckets) complete in start order.
  std::vector<TestBuf<float>> buckets;
  for (int b = 0; b < 3; ++b) buckets.emplace_back(20011);
  std::vector<WorkPtr> work;
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (size_t i = 0; i < buckets[b].size(); ++i) buckets[b][i] = static_cast<float>(e.re.rank + 1) * static_cast<float>(b + 1);
    work.push_back(c.allreduce_start(whole(buckets[b], buckets[b].size(), DType::f32), OpId{step, static_cast<uint32_t>(b)}));
  }
  work[2]->wait();
  EXPECT(work[0]->test() && work[1]->test(), "earlier buckets finished before the last one");
  const float tri = static_cast<float>(W * (W + 1) / 2);
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT(buckets[b][0] == tri * static_cast<float>(b + 1) && buckets[b].back() == tri * static_cast<float>(b + 1),
           "bucket ", b, " got ", buckets[b][0]);
  }
  c.barrier(OpId{step + 1, 0});
  // Ring pieces of >= 32 KiB: at W > 1 the 1M+3 and 64 MiB cases read from the peers
  // (unless they went zero-copy).
  check_single_copy(c, W > 1 && (large || W <= 4) && !all_registered());
  check_paths(c, true, !large);
  return g_failures ? 1 : 0;
}

int scenario_collectives() {
  Env e = make_env();
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 5, base_options());
  const int W = e.re.world, r = e.re.rank;
  uint64_t step = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
    for (int root : {0, W - 1}) {
      std::vector<uint8_t> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = r == root ? static_cast<uint8_t>(i * 7 + root) : 0;
      c.broadcast(Buffer{b.data(), n / 8, DType::u64}, root, OpId{step++, 0});
      size_t bad = 0;
      for (size_t i = 0; i < n / 8 * 8; ++i) bad += b[i] != static_cast<uint8_t>(i * 7 + root);
      EXPECT(bad == 0, "broadcast of ", n, " bytes from ", root, ": ", bad, " wrong");
    }
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}}) {
    std::vector<double> in(n), out(n * W, -1);
    for (size_t i = 0; i < n; ++i) in[i] = r * 1e6 + static_cast<double>(i);
    c.allgather(Buffer{in.data(), n, DType::f64}, Buffer{out.data(), out.size(), DType::f64}, OpId{step++, 0});
    size_t bad = 0;
    for (int q = 0; q < W; ++q)
      for (size_t i = 0; i < n; ++i) bad += out[q * n + i] != q * 1e6 + static_cast<double>(i);
    EXPECT(bad == 0, "all-gather of ", n, ": ", bad, " wrong");
  }
  c.barrier(OpId{step++, 0});
  // Blobs round the ring (state transfer), 8 MiB each, with both directions in flight.
  const size_t blob = size_t{8} << 20;
  std::vector<uint8_t> out(blob), in(blob);
  for (size_t i = 0; i < blob; ++i) out[i] = static_cast<uint8_t>(i * 13 + r);
  const int right = (r + 1) % W, left = (r - 1 + W) % W;
  auto rw = c.recv_start(left, in.data(), blob, OpId{step, 2});
  auto sw = c.send_start(right, out.data(), blob, OpId{step, 2});
  rw->wait();
  sw->wait();
  size_t bad = 0;
  for (size_t i = 0; i < blob; ++i) bad += in[i] != static_cast<uint8_t>(i * 13 + left);
  EXPECT(bad == 0, "blob from ", left, ": ", bad, " wrong bytes");
  ++step;
  // Bad arguments are typed errors naming the problem.
  try {
    c.allreduce_start(Buffer{nullptr, 0, DType::f32}, OpId{step, 255});
    EXPECT(false, "op 255 accepted");
  } catch (const rf::InvalidInput& err) {
    EXPECT(std::string(err.what()).find("op 255") != std::string::npos, err.what());
  }
  c.barrier(OpId{step + 1, 0});  // nobody leaves while others still talk to it
  check_single_copy(c, true);  // 3 MiB broadcasts in pieces of chunk_bytes
  return g_failures ? 1 : 0;
}

// A blob of the wrong size is an error that says so (and poisons that communicator, so it
// gets one of its own).
int scenario_blob_size() {
  Env e = make_env();
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 6);
  const int r = e.re.rank;
  const uint64_t step = 1;
  if (r == 0) {
    uint64_t x[2] = {1, 2};
    c.send(1, x, sizeof(x), OpId{step, 3});
  } else if (r == 1) {
    uint64_t y[1];
    try {
      c.recv(0, y, sizeof(y), OpId{step, 3});
      EXPECT(false, "a 16-byte blob was received into 8 bytes");
    } catch (const CommError& err) {
      EXPECT(std::string(err.what()).find("recv g=6 s=1 op=3") != std::string::npos, err.what());
    }
  }
  return g_failures ? 1 : 0;
}

// Destroying a communicator with a collective in flight (its progress thread driving it, a
// peer that never joins): bounded, and the Work then says why it failed.
int scenario_destroy() {
  Env e = make_env();
  const int r = e.re.rank;
  UcxOptions o = base_options();
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  auto comm = std::make_unique<UcxCommunicator>(e.ctx, *e.store, r, e.re.world, 11, o);
  if (r == 1) {
    e.store->wait_get("destroyed", std::chrono::seconds(20));
    return 0;
  }
  std::vector<float> buf(size_t{1} << 20, 1.0f);
  WorkPtr w = comm->allreduce_start(Buffer{buf.data(), buf.size(), DType::f32}, OpId{1, 0});
  EXPECT(!w->test(), "finished without rank 1");
  const TimePoint t = rf::Clock::now();
  comm.reset();
  EXPECT(elapsed_ms(t) < 1000, "destroying took ", elapsed_ms(t), " ms");
  try {
    w->wait();
    EXPECT(false, "the collective succeeded after its communicator was destroyed");
  } catch (const Aborted& err) {
    EXPECT(std::string(err.what()).find("communicator destroyed") != std::string::npos, err.what());
  }
  e.store->set("destroyed", {1});
  return g_failures ? 1 : 0;
}

// regen (run as regen_reg): buckets outlive generations. Generation 1 all-reduces two
// registered buffers zero-copy; generation 2 (a new communicator, same processes) does it
// again: right sums both times, and generation 2 maps no peer buffer anew (the mappings are
// cached process-wide, so a recovery's survivors do not pay the page-table set-up again).
int scenario_regen() {
  Env e = make_env();
  EXPECT(all_registered(), "regen runs as regen_reg");
  TestBuf<float> a(size_t{1} << 18), b((size_t{1} << 16) + 7);
  uint64_t maps_after_g1 = 0;
  for (uint64_t g = 1; g <= 2; ++g) {
    UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, g, base_options());
    check_allreduce(c, a, a.size(), DType::f32, 10 * g);
    check_allreduce(c, b, b.size(), DType::f32, 10 * g + 2);
    EXPECT(c.zero_copy_allreduces() == 2, "generation ", g, ": ", c.zero_copy_allreduces(), " zero-copy all-reduces");
    if (g == 1) maps_after_g1 = peer_buffer_maps_made();
    else EXPECT(peer_buffer_maps_made() == maps_after_g1, "generation 2 mapped ", peer_buffer_maps_made() - maps_after_g1, " peer buffers again");
    c.barrier(OpId{10 * g + 5, 0});  // nobody destroys its communicator while a peer still needs it
  }
  EXPECT(maps_after_g1 == 2 * static_cast<uint64_t>(e.re.world - 1), "generation 1 mapped ", maps_after_g1);
  return g_failures ? 1 : 0;
}

// tag_mismatch: rank 1 all-reduces step 6 where rank 0 all-reduces step 5 (a caller bug,
// or a rank a step off). Messages carry the tag, so the ring never matches them; the
// shared-memory paths must not silently sum the two steps either: every rank fails with a
// typed error, for a small (slot) and a large (zero-copy under _reg) all-reduce.
int scenario_tag_mismatch() {
  Env e = make_env();
  const int r = e.re.rank;
  UcxOptions o = base_options();
  o.stall_timeout = std::chrono::milliseconds(2000);  // the message paths end by D3
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  uint64_t g = 20;
  for (size_t n : {size_t{16}, size_t{1} << 16}) {
    UcxCommunicator c(e.ctx, *e.store, r, e.re.world, g++, o);
    TestBuf<float> f(n, 1.0f);
    try {
      c.allreduce(whole(f, n, DType::f32), OpId{r == 1 ? 6u : 5u, 0});
      EXPECT(false, "count ", n, ": all-reduce of step 5 with step 6 completed (sum ", f[0], ")");
    } catch (const CommError& err) {
      std::cerr << "rank " << r << " count " << n << " failed as it should: " << err.what() << "\n";
    }
  }
  return g_failures ? 1 : 0;
}

}  // namespace

std::vector<NamedScenario> collective_scenarios() {
  return {{"allreduce", [] { return scenario_allreduce(false); }},
          {"large", [] { return scenario_allreduce(true); }},
          {"collectives", scenario_collectives},
          {"blob_size", scenario_blob_size},
          {"destroy", scenario_destroy},
          {"regen", scenario_regen},
          {"tag_mismatch", scenario_tag_mismatch}};
}

}  // namespace rf::comm::mptest
