// comm_bench — nccl-tests style all-reduce benchmark for ringfence's backends.
//
//   comm_bench --backend ucx|gloo|mpi --ranks W -b MIN -e MAX -f FACTOR -n ITERS -w WARMUP
//              [--json FILE] [--chunk-bytes N] [--flows N] [--small-bytes N] [--deadline S]
//              [--idle-spins N] [--idle-yields N] [--single-copy-bytes N (0: off)]
//              [--single-copy-max-bytes N (cap on the all-reduce size taking it)]
//              [--unregistered] [--no-shm] [--shm-slot-bytes N]
//              (our backend's knobs, for tuning)
//
// Our backend all-reduces a registered buffer (comm/shared_buffer.h) by default, as ddp's
// buckets are, so large sizes take the zero-copy path; --unregistered uses plain memory
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
#include "comm/local_launcher.h"
#include "comm/shared_buffer.h"

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

size_t parse_size(const std::string& s) {
  if (s.empty()) throw rf::InvalidInput("empty size");
  size_t pos = 0;
  unsigned long long v;
  try {
    v = std::stoull(s, &pos);
  } catch (const std::logic_error&) {
    throw rf::InvalidInput(rf::str("size '", s, "' is not a number"));
  }
  std::string suf = s.substr(pos);
  if (suf == "K" || suf == "k") v <<= 10;
  else if (suf == "M" || suf == "m") v <<= 20;
  else if (suf == "G" || suf == "g") v <<= 30;
  else if (!suf.empty()) throw rf::InvalidInput(rf::str("size '", s, "': unknown suffix '", suf, "' (K, M, G)"));
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw rf::InvalidInput(rf::str("option ", k, " needs a value"));
      return argv[++i];
    };
    auto num = [&](const std::string& v) {
      try {
        return std::stod(v);
      } catch (const std::logic_error&) {
        throw rf::InvalidInput(rf::str("option ", k, ": '", v, "' is not a number"));
      }
    };
    if (k == "--backend") a.backend = val();
    else if (k == "--ranks") a.ranks = static_cast<int>(num(val()));
    else if (k == "-b") a.min_bytes = parse_size(val());
    else if (k == "-e") a.max_bytes = parse_size(val());
    else if (k == "-f") a.factor = num(val());
    else if (k == "-n") a.iters = static_cast<int>(num(val()));
    else if (k == "-w") a.warmup = static_cast<int>(num(val()));
    else if (k == "--json") a.json = val();
    else if (k == "--chunk-bytes") a.tuning.chunk_bytes = parse_size(val());
    else if (k == "--flows") a.tuning.flows = static_cast<int>(num(val()));
    else if (k == "--small-bytes") a.tuning.small_bytes = static_cast<long long>(parse_size(val()));
    else if (k == "--idle-spins") a.tuning.idle_spins = static_cast<long long>(num(val()));
    else if (k == "--idle-yields") a.tuning.idle_yields = static_cast<long long>(num(val()));
    else if (k == "--single-copy-bytes") a.tuning.single_copy_bytes = static_cast<long long>(parse_size(val()));
    else if (k == "--single-copy-max-bytes") a.tuning.single_copy_max_bytes = static_cast<long long>(parse_size(val()));
    else if (k == "--unregistered") a.tuning.unregistered = true;
    else if (k == "--no-shm") a.tuning.no_shm = true;
    else if (k == "--shm-slot-bytes") a.tuning.shm_slot_bytes = static_cast<long long>(parse_size(val()));
    else if (k == "--deadline") a.deadline_s = static_cast<int>(num(val()));
    else throw rf::InvalidInput(rf::str("unknown option '", k, "'"));
  }
  if (a.backend != "ucx" && a.backend != "gloo" && a.backend != "mpi") {
    throw rf::InvalidInput(rf::str("--backend ", a.backend, ": expected ucx, gloo or mpi"));
  }
  if (a.ranks < 1 || a.ranks > 64) throw rf::InvalidInput(rf::str("--ranks ", a.ranks, ": expected 1..64"));
  if (a.min_bytes > a.max_bytes) throw rf::InvalidInput("-b must not exceed -e");
  if (a.factor <= 1) throw rf::InvalidInput("-f must be > 1");
  if (a.iters < 1 || a.warmup < 0) throw rf::InvalidInput("-n must be >= 1 and -w >= 0");
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
  // Ours: a SharedBuffer (registered, zero-copy) unless --unregistered.
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
      be->allreduce(buf, count);
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
  try {
    const Args a = parse(argc, argv);
    if (std::getenv("RF_BENCH_CHILD")) return run_rank(a, argc, argv);
    return launch(a, argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "comm_bench: " << e.what() << "\n";
    return 2;
  }
}
