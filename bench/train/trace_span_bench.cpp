// The cost of one traced span (base/trace.h) on the recording thread, and on the writer
// thread that formats and writes it, against a disabled tracer (one branch).
//   build/bin/trace_span_bench
// The recording thread's cost is what a training step pays per span; train_mlp records
// six per step (forward, backward, allreduce wait, one all-reduce per bucket, optimizer,
// step) and reads the clock four more times than without tracing.
#include <cstdio>
#include <string>

#include "base/trace.h"

namespace {

constexpr int kBurst = 60000;  // below the ring's 65536: nothing is dropped
constexpr int kBursts = 30;

// ns per span() call, and ns per span of the writer's drain (0 when disabled).
std::pair<double, double> measure(rf::Tracer& t) {
  double record_ns = 0, write_ns = 0;
  for (int b = 0; b < kBursts; ++b) {
    const rf::TimePoint at = rf::Clock::now();
    rf::TimePoint t0 = rf::Clock::now();
    for (int i = 0; i < kBurst; ++i)
      t.span("forward", rf::Tracer::kTrain, at, at, {.step = i, .generation = 1, .rank = 0});
    record_ns += std::chrono::duration<double, std::nano>(rf::Clock::now() - t0).count();
    t0 = rf::Clock::now();
    t.flush();  // what the writer thread does every 50 ms
    write_ns += std::chrono::duration<double, std::nano>(rf::Clock::now() - t0).count();
  }
  return {record_ns / (kBurst * kBursts), write_ns / (kBurst * kBursts)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h";
    std::fprintf(help ? stdout : stderr, "usage: trace_span_bench   (no flags; bench/train/trace_span_bench.cpp)\n");
    return help ? 0 : 2;
  }
  const std::string path = "/tmp/rf_trace_span_bench.jsonl";
  rf::Tracer off;
  rf::Tracer on(path, size_t{1} << 16, std::chrono::hours(1));  // drained only by flush() here
  for (int rep = 0; rep < 2; ++rep) {
    const auto [off_record, off_write] = measure(off);
    const auto [on_record, on_write] = measure(on);
    std::printf("span(): disabled %.2f ns, enabled %.2f ns on the recording thread; "
                "writer %.0f ns per span; dropped %llu\n",
                off_record, on_record, on_write, static_cast<unsigned long long>(on.dropped()));
  }
  int64_t sink = 0;
  const rf::TimePoint t0 = rf::Clock::now();
  for (int i = 0; i < 10'000'000; ++i) sink += rf::Clock::now().time_since_epoch().count() & 1;
  const double clock_ns = std::chrono::duration<double, std::nano>(rf::Clock::now() - t0).count() / 1e7;
  std::printf("Clock::now(): %.1f ns (%lld)\n", clock_ns, static_cast<long long>(sink));
  std::remove(path.c_str());
}
