// train_bench — samples/s of one training step (forward, loss, backward, SGD update) of
// the reference models on a fixed random batch, after warm-up steps (so the caching
// allocator is warm, as in a real run). Data loading is excluded: this measures the core.
//
//   train_bench [--model mlp|cnn|both] [--batch 128] [--threads 1] [--steps N] [--warmup W]
//               [--no-malloc-tuning]
// Output, one line per model (parsed by compare_torch.py and tests/models/page_faults.sh):
//   ringfence mlp batch 128 threads 1 steps 200: 37000 samples/s (5.4 ms/step, 5.3 cpu ms/step,
//   0.00 page faults/step)
// cpu ms/step is the process's CPU time (user + system) over the timed steps: on a shared
// machine it leaves out the time spent waiting for a core, which wall time does not.
// Page faults are counted over the timed steps (getrusage): after warm-up a step should
// fault no page at all, since each costs ~13 us here. main() opts in to
// rf::tune_malloc_for_training() as every training program should; --no-malloc-tuning
// leaves glibc's defaults, to show what the tuning is for (Eigen's packing buffers fault).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/clock.h"
#include "core/malloc_tuning.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "core/random.h"
#include "kernels/cpu/gemm.h"
#include "models/reference.h"

using namespace rf;

static long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}

static double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

struct BenchResult {
  double seconds, cpu_seconds;
  long faults;
};

static BenchResult bench(models::ModelKind kind, int64_t batch, int steps, int warmup) {
  auto model = models::make_model(kind, 0);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  Generator g(1);
  Tensor x = Tensor::empty({batch, 1, 28, 28});
  for (float& v : x.values()) v = g.uniform(-1.0f, 2.0f);
  std::vector<int32_t> labels(batch);
  for (auto& l : labels) l = static_cast<int32_t>(g.next_u64() % 10);
  auto step = [&] {
    sgd.zero_grad();
    Tensor loss = cross_entropy((*model)(x), labels);
    loss.backward();
    sgd.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  const long f0 = minor_faults();
  const double c0 = cpu_seconds();
  const TimePoint t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double wall = seconds_since(t0);
  return {wall, cpu_seconds() - c0, minor_faults() - f0};
}

int main(int argc, char** argv) {
  std::string which = "both";
  int64_t batch = 128;
  int threads = 1, steps = 0, warmup = 5;
  bool tune_malloc = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "train_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto num = [&](const std::string& v) {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1) {
        std::fprintf(stderr, "train_bench: %s: '%s' is not a positive integer\n", a.c_str(), v.c_str());
        std::exit(2);
      }
      return n;
    };
    if (a == "--model") which = next();
    else if (a == "--batch") batch = num(next());
    else if (a == "--threads") threads = static_cast<int>(num(next()));
    else if (a == "--steps") steps = static_cast<int>(num(next()));
    else if (a == "--warmup") warmup = static_cast<int>(num(next()));
    else if (a == "--no-malloc-tuning") tune_malloc = false;
    else if (a == "--help") {
      std::printf("usage: train_bench [--model mlp|cnn|both] [--batch 128] [--threads 1] [--steps N] [--warmup 5] "
                  "[--no-malloc-tuning]\n");
      return 0;
    } else {
      std::fprintf(stderr, "train_bench: unknown flag '%s'\n", a.c_str());
      return 2;
    }
  }
  if (which != "mlp" && which != "cnn" && which != "both") {
    std::fprintf(stderr, "train_bench: --model must be mlp, cnn or both, got '%s'\n", which.c_str());
    return 2;
  }
  // Before any training allocation, so the first step's heap is already kept mapped.
  if (tune_malloc && !rf::tune_malloc_for_training())
    std::fprintf(stderr, "train_bench: warning: glibc refused a malloc setting (mallopt)\n");
  kernels::cpu::set_num_threads(threads);
  for (auto kind : {models::ModelKind::MLP, models::ModelKind::CNN}) {
    if (which != "both" && which != models::model_name(kind)) continue;
    const int n = steps > 0 ? steps : (kind == models::ModelKind::MLP ? 200 : 40);
    const BenchResult r = bench(kind, batch, n, warmup);
    std::printf("ringfence %s batch %lld threads %d steps %d: %.0f samples/s (%.2f ms/step, "
                "%.2f cpu ms/step, %.2f page faults/step)\n",
                models::model_name(kind), static_cast<long long>(batch), threads, n,
                n * batch / r.seconds, 1000.0 * r.seconds / n, 1000.0 * r.cpu_seconds / n,
                static_cast<double>(r.faults) / n);
    std::fflush(stdout);
  }
  return 0;
}
