// comm_mp_test: the single-copy path: aborts and releases during a read, its size cap.
#include "tests/comm/mp/mp_support.h"

namespace rf::comm::mptest {
namespace {

// Abort between the reduce-scatter and the all-gather, with the all-gather piece already
// offered for a single-copy read: rank 0 aborts (from on_chunk), and as soon as its
// all-reduce has failed it scribbles over its buffer, as a caller may. Rank 1 holds its
// read back until then (its on_chunk waits for the store key, a condition, not a sleep).
// Rank 1 must then fail, or complete with exactly the right sum: never with bytes read
// after their owner could modify them (R1/R4; the hold word, ucx/single_copy.h).
// sc_release: the same, but rank 0 only releases (inject_release) and scribbles inside its
// on_chunk, sending no farewell: rank 1's read finds the hold word cleared and must fail.
int scenario_sc_abort(bool release_only) {
  Env e = make_env();
  const int r = e.re.rank;
  UcxOptions o = base_options();
  o.flight_recorder_path = e.re.store_dir + "/flight." + std::to_string(r);
  o.flows = 1;
  o.chunk_bytes = size_t{1} << 20;  // one piece per segment: chunk 0 reduce-scatter, 1 all-gather
  o.small_allreduce_bytes = 0;      // the ring, whatever the size
  UcxCommunicator* self = nullptr;
  TestBuf<float> buf(size_t{1} << 18, static_cast<float>(r + 1));  // 1 MiB: two 512 KiB segments
  bool scribbled = false;
  if (r == 0 && release_only) {
    o.on_chunk = [&](const ChunkEvent& ev) {
      if (ev.chunks_done != 1) return;
      // Zero-copy: rank 1 maps our buffer before its phase 1; release only after that, so
      // the check after its reads is what must fail it (a release before its mapping
      // fails the mapping instead: zc_refd).
      if (all_registered()) e.store->wait_get("mapped", std::chrono::seconds(20));
      self->inject_release();
      std::fill(buf.begin(), buf.end(), std::numeric_limits<float>::quiet_NaN());
      e.store->set("scribbled", {1});
      scribbled = true;
    };
  } else if (r == 0) {
    o.on_chunk = [&](const ChunkEvent& ev) { if (ev.chunks_done == 1) self->abort("test: abort mid-transfer"); };
  } else {
    o.on_chunk = [&](const ChunkEvent& ev) {
      if (ev.chunks_done != 1) return;
      if (all_registered()) e.store->set("mapped", {1});
      e.store->wait_get("scribbled", std::chrono::seconds(20));
    };
  }
  UcxCommunicator c(e.ctx, *e.store, r, e.re.world, 12, o);
  self = &c;
  try {
    c.allreduce(whole(buf, buf.size(), DType::f32), OpId{7, 0});
    EXPECT(r == 1, "rank 0 completed although it aborted");
    size_t bad = 0;
    for (float v : buf) bad += v != 3.0f;
    EXPECT(bad == 0, bad, " wrong elements: completed with bytes read after rank 0 released them");
    std::cerr << "rank " << r << ": completed with the right sum (read before rank 0 released its buffer)\n";
  } catch (const CommError& err) {
    if (r == 0 && release_only) {
      EXPECT(err.peer() == 1 || err.peer() == 0, err.what());  // rank 1's failure reaches it
    } else if (r == 0) {
      EXPECT(dynamic_cast<const Aborted*>(&err) != nullptr, err.what());
      std::fill(buf.begin(), buf.end(), std::numeric_limits<float>::quiet_NaN());
      e.store->set("scribbled", {1});
      scribbled = true;
    } else if (release_only) {
      // No farewell came: the released buffer is all rank 1 knows, and it names its owner.
      EXPECT(err.peer() == 0, "does not name rank 0: ", err.what());
      EXPECT(std::string(err.what()).find("released its buffer") != std::string::npos, err.what());
      std::cerr << "rank " << r << " failed as it should: " << err.what() << "\n";
    } else {
      // Rank 0 aborted (said so in a farewell sent before it released its buffer, so the
      // failed read finds it): rank 1 fails as aborted, relayed, blaming nobody.
      EXPECT(dynamic_cast<const Aborted*>(&err) != nullptr && err.peer() == -1 &&
                 std::string(err.what()).find("abort mid-transfer; relayed by rank 0") != std::string::npos,
             "not the relayed abort: ", err.what());
      std::cerr << "rank " << r << " failed as it should: " << err.what() << "\n";
    }
  }
  if (r == 0 && !scribbled) e.store->set("scribbled", {1});  // never leave rank 1 waiting
  if (r == 1) check_single_copy(c, !all_registered());  // its reduce-scatter piece came single-copy
  if (all_registered()) EXPECT(c.zero_copy_allreduces() == 1, "not zero-copy");
  return g_failures ? 1 : 0;
}

// sc_cap: the single-copy path's size cap (UcxOptions::single_copy_max_bytes). Collectives
// above the cap move through the FIFOs (no read), those at or below it read single-copy,
// and both give the right sums.
int scenario_sc_cap() {
  Env e = make_env();
  UcxOptions o = base_options();
  o.single_copy_max_bytes = int64_t{1} << 20;
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 3, o);
  std::vector<float> f(size_t{1} << 19);
  check_allreduce(c, f, size_t{1} << 19, DType::f32, 0);  // 2 MiB: above the cap
  EXPECT(c.single_copy_reads() == 0, c.single_copy_reads(), " single-copy reads above the cap");
  check_allreduce(c, f, size_t{1} << 18, DType::f32, 1);  // 1 MiB: at the cap
  EXPECT(c.single_copy_reads() > 0, "no single-copy read at the cap");
  c.barrier(OpId{2, 0});
  return g_failures ? 1 : 0;
}

int scenario_sc_cap_async() {
  Env e = make_env();
  UcxOptions o = base_options();
  o.single_copy_max_bytes = int64_t{1} << 20;
  UcxCommunicator c(e.ctx, *e.store, e.re.rank, e.re.world, 3, o);
  const int W = e.re.world, r = e.re.rank;
  const size_t big_n = (size_t{2} << 20) + 7, small_n = (size_t{1} << 17) + 5;  // 8 MiB, 512 KiB
  std::vector<float> big(big_n), small(small_n);
  for (uint64_t step = 0; step < 3; ++step) {
    for (size_t i = 0; i < big_n; ++i) big[i] = typed_value<float>(r, i);
    for (size_t i = 0; i < small_n; ++i) small[i] = typed_value<float>(r, i);
    WorkPtr w = c.allreduce_start(Buffer{big.data(), big_n, DType::f32}, OpId{step, 0});
    if (step == 1) w->wait();  // the ddp order: wait for the started, then the blocking one
    c.allreduce(Buffer{small.data(), small_n, DType::f32}, OpId{step, 1});
    w->wait();
    check_sum(big, big_n, W, "started (above the cap)");
    check_sum(small, small_n, W, "blocking (below the cap)");
  }
  check_single_copy(c, true);  // the small one did read single-copy
  c.barrier(OpId{9, 0});
  return g_failures ? 1 : 0;
}

}  // namespace

std::vector<NamedScenario> single_copy_scenarios() {
  return {{"sc_abort", [] { return scenario_sc_abort(false); }},
          {"sc_release", [] { return scenario_sc_abort(true); }},
          {"sc_cap", scenario_sc_cap},
          {"sc_cap_async", scenario_sc_cap_async}};
}

}  // namespace rf::comm::mptest
