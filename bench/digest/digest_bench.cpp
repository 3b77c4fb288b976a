// digest_bench — throughput of the state digest (base/digest.cpp) against its candidates,
// on state-sized buffers (bench/RESULTS.md "Checkpoints").
//
//   build/bin/digest_bench > bench/out/digest.json     (the table goes to stderr)
//
// Buffers are allocated, filled and hashed once before timing (a page fault costs ~13 us
// on this VM, more than hashing the page). Each trial hashes a buffer enough times to take
// >= 50 ms of this thread's CPU time; the variants take turns within a trial, so load from
// other processes falls on all of them alike. Time is the thread's CPU time, not the wall
// clock: on a shared machine a descheduled thread would otherwise look slow. Reported: the
// median trial's GB/s (10^9 bytes per CPU second), one core.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <ctime>
#include <vector>

// GCC 12's AVX-512 intrinsics warn falsely under XXH3's vector loop (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

#include "base/digest.h"
#include "bench/digest/four_lane.h"
#include "bench/digest/xxh3_shared.h"

namespace {

using Hash = std::function<uint64_t(const void*, size_t)>;

struct Variant {
  const char* name;
  Hash hash;
};

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "?", simd;
  while (std::getline(f, line)) {
    if (model == "?" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0) {
      simd = line.find(" avx512f") != std::string::npos ? "AVX-512" : line.find(" avx2") != std::string::npos ? "AVX2" : "SSE2";
      break;
    }
  }
  return model + " (" + simd + ")";
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char**) {
  if (argc > 1) {
    std::fprintf(stderr, "usage: digest_bench > OUT.json   (no flags; the table goes to stderr)\n");
    return 2;
  }
  const std::vector<Variant> variants = {
      {"StateDigest (base/digest.cpp)",
       [](const void* p, size_t n) {
         rf::StateDigest d;
         d.update(p, n);
         return d.value()[0];
       }},
      {"four-lane (digest version none)",
       [](const void* p, size_t n) {
         rf::bench::FourLaneDigest d;
         d.update(p, n);
         return d.value()[0];
       }},
      {"XXH3-128 inlined (xxhash.h, -march=native)",
       [](const void* p, size_t n) {
         XXH3_state_t s;
         XXH3_128bits_reset(&s);
         XXH3_128bits_update(&s, p, n);
         return XXH3_128bits_digest(&s).low64;
       }},
      {"XXH3-128 libxxhash.so", rf::bench::xxh3_shared},
      {"XXH3-128 libxxhash.so, x86 dispatch", rf::bench::xxh3_shared_dispatch},
  };
  // 2.7 MB: train_mlp's state (parameters + momentum); 32 MiB: past the L2/L3 of a core;
  // 128 MiB: a 16M-parameter state with momentum, memory-bound.
  const std::vector<size_t> sizes = {2'700'000, size_t{32} << 20, size_t{128} << 20};
  constexpr int kTrials = 15;
  constexpr double kMinTrialSeconds = 0.05;

  std::mt19937_64 gen(1);
  std::vector<std::vector<uint64_t>> bufs;
  for (size_t n : sizes) {
    bufs.emplace_back((n + 7) / 8);
    for (auto& w : bufs.back()) w = gen();  // touches every page
  }
  uint64_t sink = 0;
  std::string rows;
  std::fprintf(stderr, "%s\n%-44s %12s %10s\n", cpu_model().c_str(), "variant", "bytes", "GB/s");
  for (size_t si = 0; si < sizes.size(); ++si) {
    const void* p = bufs[si].data();
    const size_t n = sizes[si];
    std::vector<int> reps(variants.size());
    for (size_t v = 0; v < variants.size(); ++v) {  // warm-up, and how many hashes fill a trial
      sink += variants[v].hash(p, n);
      const double t0 = cpu_seconds();
      sink += variants[v].hash(p, n);
      const double s = cpu_seconds() - t0;
      reps[v] = std::max(1, static_cast<int>(kMinTrialSeconds / std::max(s, 1e-9)));
    }
    std::vector<std::vector<double>> gbps(variants.size());
    for (int t = 0; t < kTrials; ++t)
      for (size_t v = 0; v < variants.size(); ++v) {
        const double t0 = cpu_seconds();
        for (int r = 0; r < reps[v]; ++r) sink += variants[v].hash(p, n);
        const double s = cpu_seconds() - t0;
        gbps[v].push_back(static_cast<double>(n) * reps[v] / s / 1e9);
      }
    for (size_t v = 0; v < variants.size(); ++v) {
      const double med = median(gbps[v]);
      const auto [lo, hi] = std::minmax_element(gbps[v].begin(), gbps[v].end());
      std::fprintf(stderr, "%-44s %12zu %10.2f  (%.2f .. %.2f)\n", variants[v].name, n, med, *lo, *hi);
      char row[512];
      std::snprintf(row, sizeof row,
                    "%s    {\"variant\": \"%s\", \"bytes\": %zu, \"GBps_median\": %.3f, \"GBps_min\": %.3f, "
                    "\"GBps_max\": %.3f}",
                    rows.empty() ? "" : ",\n", variants[v].name, n, med, *lo, *hi);
      rows += row;
    }
  }
  std::printf("{\n  \"cpu\": \"%s\",\n  \"trials\": %d,\n  \"results\": [\n%s\n  ]\n}\n", cpu_model().c_str(),
              kTrials, rows.c_str());
  std::fprintf(stderr, "(checksum %llx)\n", static_cast<unsigned long long>(sink));
  return 0;
}
