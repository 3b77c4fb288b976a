// comm_bench — nccl-tests style all-reduce benchmark for ringfence's backends.
//
//   comm_bench --backend ucx|gloo|mpi --ranks W -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP
//              [--json FILE] [--chunk-bytes N] [--flows N] [--small-bytes N] [--deadline S]
//              [--idle-spins N] [--idle-yields N] [--single-copy-bytes N (0: off)]
//              [--single-copy-max-bytes N (cap on the all-reduce size taking it)]
//              [--unregistered] [--no-shm] [--shm-slot-bytes N]
//              (our backend's knobs, for tuning)
//
// Our backend all-reduces registered memory (comm::allocate_registered, named in every
// call) by default, as ddp's buckets are, so large sizes take the zero-copy path; --unregistered uses plain memory
// (the ring / recursive doubling), --no-shm turns the shared-memory path off altogether.
// The header line says which.
//
// Started by hand it is the launcher: it starts its own W ranks (for mpi through
// `mpirun -np W`), each rank runs every size, rank 0 prints the table. Like mpirun, it
// pins rank r to the r-th core when the ranks fit the cores, and does not otherwise. Sizes take K/M/G
// suffixes (powers of 1024). Per size: WARMUP untimed then ITERS timed iterations, each
// preceded by an untimed refill of the buffer and a barrier; time = the median iteration
// (mean over ranks of each rank's median); every iteration's result is verified against
// the exact sum (small integers, exact in float), #wrong counts wrong elements.
// algbw = bytes / time, busbw = algbw * 2(W-1)/W (nccl-tests' all-reduce factor), GB = 1e9.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "bench/comm/backend.h"
#include "bench/flags.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/shm/shared_buffer.h"

namespace {

struct Args {
  std::string backend = "ucx";
  int ranks = 2;
  size_t min_bytes = 8, max_bytes = size_t{64} << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  std::string json;
  rf::bench::BenchTuning tuning;
  int deadline_s = 900;
};

// A byte count with an optional K/M/G suffix (powers of 1024).
size_t parse_size(const std::string& flag, const std::string& s) {
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  const std::string suf = s.substr(digits);
  int shift = 0;
  if (suf == "K" || suf == "k") shift = 10;
  else if (suf == "M" || suf == "m") shift = 20;
  else if (suf == "G" || suf == "g") shift = 30;
  else if (!suf.empty() || digits == 0)
    throw rf::bench::UsageError(rf::str(flag, ": '", s, "' is not a size (a number with an optional K, M or G)"));
  const auto v = static_cast<uint64_t>(rf::bench::parse_int_flag(flag, s.substr(0, digits), 0));
  if (v > (~uint64_t{0} >> shift)) throw rf::bench::UsageError(rf::str(flag, ": '", s, "' is too large"));
  return static_cast<size_t>(v << shift);
}

// nullopt after --help.
std::optional<Args> parse(int argc, char** argv) {
  Args a;
  rf::bench::Flags flags("comm_bench", "comm_bench [flags]   (all-reduce bus bandwidth per size, nccl-tests style)");
  auto size = [](size_t& out) { return [&out](const std::string& f, const std::string& v) { out = parse_size(f, v); }; };
  auto size_ll = [](long long& out) {
    return [&out](const std::string& f, const std::string& v) { out = static_cast<long long>(parse_size(f, v)); };
  };
  flags.text("--backend", "ucx|gloo|mpi", "the backend (default ucx)", a.backend)
      .integer("--ranks", "ranks W (default 2)", a.ranks, 1, 64)
      .value("-b", "SIZE", "smallest size in bytes, K/M/G suffixes (default 8)", size(a.min_bytes))
      .value("-e", "SIZE", "largest size (default 64M)", size(a.max_bytes))
      .value("-f", "X", "size factor, > 1 (default 2)",
             [&a](const std::string& f, const std::string& v) { a.factor = rf::bench::parse_float_flag(f, v, 1.0); })
      .integer("-n", "timed iterations per size (default 20)", a.iters, 1)
      .integer("-w", "untimed warm-up iterations per size (default 5)", a.warmup, 0)
      .text("--json", "FILE", "also write the table as JSON", a.json)
      .value("--chunk-bytes", "SIZE", "ours: pipeline chunk", size(a.tuning.chunk_bytes))
      .integer("--flows", "ours: parallel flows (0: default)", a.tuning.flows, 0)
      .value("--small-bytes", "SIZE", "ours: recursive doubling up to this size", size_ll(a.tuning.small_bytes))
      .integer("--idle-spins", "ours: spins before yielding", a.tuning.idle_spins, 0)
      .integer("--idle-yields", "ours: yields before sleeping", a.tuning.idle_yields, 0)
      .value("--single-copy-bytes", "SIZE", "ours: single-copy path from this size (0: off)",
             size_ll(a.tuning.single_copy_bytes))
      .value("--single-copy-max-bytes", "SIZE", "ours: cap on the all-reduce size taking it",
             size_ll(a.tuning.single_copy_max_bytes))
      .toggle("--unregistered", "ours: plain memory instead of a registered buffer", [&a] { a.tuning.unregistered = true; })
      .toggle("--no-shm", "ours: no shared-memory path", [&a] { a.tuning.no_shm = true; })
      .value("--shm-slot-bytes", "SIZE", "ours: shared-memory slot size", size_ll(a.tuning.shm_slot_bytes))
      .integer("--deadline", "seconds before the ranks are killed (default 900)", a.deadline_s, 1);
  if (!flags.parse(argc, argv)) return std::nullopt;
  if (a.backend != "ucx" && a.backend != "gloo" && a.backend != "mpi")
    throw rf::bench::UsageError(rf::str("--backend: '", a.backend, "' is not ucx, gloo or mpi"));
  if (a.min_bytes > a.max_bytes) throw rf::bench::UsageError(rf::str("-b ", a.min_bytes, " exceeds -e ", a.max_bytes));
  return a;
}

float value(int rank, size_t i) { return static_cast<float>((i * 7 + static_cast<size_t>(rank) * 3) % 16 + 1); }

int run_rank(const Args& a, int argc, char** argv) {
  std::unique_ptr<rf::bench::BenchBackend> be;
  if (a.backend == "ucx") be = rf::bench::make_ucx_backend(a.tuning);
#ifdef RF_BENCH_HAVE_GLOO
  else if (a.backend == "gloo") be = rf::bench::make_gloo_backend();
#endif
#ifdef RF_BENCH_HAVE_MPI
  else if (a.backend == "mpi") be = rf::bench::make_mpi_backend(&argc, &argv);
#endif
  else throw rf::InvalidInput(rf::str("backend ", a.backend, " was not built (its package was not found)"));
  (void)argc;
  (void)argv;
  const int rank = be->rank(), world = be->world();
  // One buffer, allocated and touched once: page faults cost ~13 us / 4 KiB here.
  // Ours: registered memory (a SharedBuffer: zero-copy) unless --unregistered.
  const size_t elems = std::max<size_t>(a.max_bytes / 4, 1);
  const bool registered = a.backend == "ucx" && !a.tuning.unregistered && !a.tuning.no_shm;
  rf::comm::SharedBuffer shared(registered ? elems * 4 : 0);
  std::vector<float> plain(registered ? 0 : elems, 0.0f);
  float* buf = registered ? shared.as<float>() : plain.data();
  std::vector<float> expect(elems);
  nlohmann::json records = nlohmann::json::array();
  if (rank == 0) {
    const char* what = a.backend != "ucx"       ? ""
                       : a.tuning.no_shm         ? " (shared-memory path off)"
                       : registered && shared.shared() ? " (registered buffer: zero-copy)"
                                                       : " (unregistered buffer)";
    std::printf("# comm_bench: backend %s%s, %d ranks, float sum, median of %d iterations after %d warm-up\n",
                a.backend.c_str(), what, world, a.iters, a.warmup);
    std::printf("#%12s %12s %7s %6s %11s %11s %11s %8s\n", "size(B)", "count", "type", "redop", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes;) {
    const size_t count = bytes / 4;
    for (size_t i = 0; i < count; ++i) {
      double s = 0;
      for (int r = 0; r < world; ++r) s += value(r, i);
      expect[i] = static_cast<float>(s);
    }
    std::vector<double> times;
    uint64_t wrong = 0;
    for (int it = 0; it < a.warmup + a.iters; ++it) {
      for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
      be->barrier();
      const auto t0 = rf::Clock::now();
      be->allreduce(buf, count, registered ? &shared : nullptr);
      const auto t1 = rf::Clock::now();
      for (size_t i = 0; i < count; ++i) wrong += buf[i] != expect[i];
      if (it >= a.warmup) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    const double median = times[times.size() / 2];
    uint64_t agg[2] = {wrong, static_cast<uint64_t>(median * 1000.0)};  // ns, summed over ranks
    be->allreduce_u64(agg, 2);
    const double time_us = static_cast<double>(agg[1]) / 1000.0 / world;
    const double algbw = time_us > 0 ? static_cast<double>(count * 4) / (time_us * 1e-6) / 1e9 : 0;
    const double busbw = algbw * 2.0 * (world - 1) / world;
    if (rank == 0) {
      std::printf(" %12zu %12zu %7s %6s %11.2f %11.3f %11.3f %8llu\n", count * 4, count, "float", "sum", time_us,
                  algbw, busbw, static_cast<unsigned long long>(agg[0]));
      std::fflush(stdout);
      records.push_back({{"backend", a.backend}, {"ranks", world}, {"bytes", count * 4}, {"count", count},
                         {"time_us", time_us}, {"algbw_gbs", algbw}, {"busbw_gbs", busbw}, {"wrong", agg[0]}});
    }
    if (agg[0] != 0) wrong = agg[0];
    const size_t next = static_cast<size_t>(static_cast<double>(bytes) * a.factor);
    bytes = next > bytes ? next : bytes + 1;
  }
  be->barrier();
  if (rank == 0 && !a.json.empty()) {
    std::ofstream out(a.json);
    out << records.dump(1) << "\n";
    if (!out) throw rf::InvalidInput(rf::str("cannot write --json ", a.json));
  }
  uint64_t any_wrong = 0;
  for (const auto& r : records) any_wrong += r["wrong"].get<uint64_t>();
  return any_wrong == 0 ? 0 : 3;
}

int launch(const Args& a, int argc, char** argv) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw rf::Error("cannot find my own executable");
  self[n] = 0;
  rf::comm::LocalLaunch l;
  l.deadline = std::chrono::seconds(a.deadline_s);
  l.env = {{"RF_BENCH_CHILD", "1"}};
  std::vector<std::string> rest(argv + 1, argv + argc);
  if (a.backend == "mpi") {
    l.program = "/usr/bin/mpirun";
    l.args = {"--allow-run-as-root", "--oversubscribe", "-x", "RF_BENCH_CHILD", "-np", std::to_string(a.ranks), self};
    l.args.insert(l.args.end(), rest.begin(), rest.end());
    l.world = 1;
  } else {
    l.program = self;
    l.args = rest;
    l.world = a.ranks;
    l.bind_to_cores = true;  // as mpirun does by default: one core per rank while they fit
  }
  int rc = 0;
  for (const auto& e : rf::comm::run_local_ranks(l)) {
    if (!e.ok()) {
      std::cerr << "comm_bench: " << e.describe() << "\n";
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<Args> parsed;
  try {
    parsed = parse(argc, argv);
  } catch (const rf::bench::UsageError& e) {
    std::cerr << "comm_bench: " << e.what() << " (see --help)\n";
    return 2;
  }
  if (!parsed) return 0;
  try {
    const Args& a = *parsed;
    if (std::getenv("RF_BENCH_CHILD")) return run_rank(a, argc, argv);
    return launch(a, argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "comm_bench: " << e.what() << "\n";
    return 2;
  }
}
