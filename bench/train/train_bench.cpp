// train_bench — samples/s of one training step (forward, loss, backward, SGD update) of
// the reference models on a fixed random batch, after warm-up steps (so the caching
// allocator is warm, as in a real run). Data loading is excluded: this measures the core.
//
//   train_bench [--model mlp|cnn|both] [--batch 128] [--threads 1] [--steps N] [--warmup W]
//               [--device cpu|cuda|cuda:N] [--cuda-graph] [--no-malloc-tuning] [--profile]
//               (bench/flags.h:
//               --help; a bad value exits 2)
// Output, one line per model (parsed by compare_torch.py, compare_torch_gpu.py and
// tests/models/page_faults.sh); on a GPU the line names the device after the steps:
//   ringfence mlp batch 128 threads 1 steps 200: 37000 samples/s (5.4 ms/step, 5.3 cpu ms/step,
//   0.00 page faults/step)
// On a GPU the model is built on the CPU (its initialiser draws there, as in every program)
// and its parameters moved to the device; the batch is copied there once; the clock starts
// after the warm-up steps and a device synchronisation and stops after the last step's
// synchronisation, so it times the steps' kernels, not just their launches. With
// --cuda-graph (a GPU only) the step is captured after the warm-up as a CUDA graph
// (core/cuda_graph.h), with the labels on the device too, replayed --warmup times untimed,
// and the timed steps replay it on the same batch, as compare_torch_gpu.py's PyTorch
// "graph" mode does; the line ends in "(cuda graph)".
// cpu ms/step is the process's CPU time (user + system) over the timed steps: on a shared
// machine it leaves out the time spent waiting for a core, which wall time does not.
// Page faults are counted over the timed steps (getrusage): after warm-up a step should
// fault no page at all, since each costs ~13 us here. main() opts in to
// rf::tune_malloc_for_training() as every training program should; --no-malloc-tuning
// leaves glibc's defaults, to show what the tuning is for (Eigen's packing buffers fault).
// --profile brackets the timed steps with cudaProfilerStart/Stop, so a profiler run with
// its collection off at the start (ncu --profile-from-start off: bench/train/profile_gpu.py)
// sees those steps' kernels only.
#include <sys/resource.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "bench/flags.h"
#include "core/cuda_graph.h"
#include "core/cuda_runtime.h"
#include "core/device_runtime.h"
#include "core/malloc_tuning.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "core/random.h"
#include "kernels/cpu/gemm.h"
#include "models/reference.h"
#include "models/train_setup.h"

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

static BenchResult time_steps(models::ModelKind kind, int64_t batch, int steps, int warmup, Device device,
                              bool cuda_graph, bool profile) {
  auto model = models::make_model(kind, 0);
  models::move_parameters(*model, device);  // as the programs do (models/train_setup.h)
  optim::SGD sgd(model->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  Generator g(1);
  std::vector<float> host(static_cast<size_t>(batch) * 28 * 28);
  for (float& v : host) v = g.uniform(-1.0f, 2.0f);
  const Tensor x = Tensor::from({batch, 1, 28, 28}, host, device);
  DeviceRuntime& rt = runtime(device, "train_bench");
  std::vector<int32_t> labels(batch);
  for (auto& l : labels) l = static_cast<int32_t>(g.next_u64() % 10);
  std::function<void()> step = [&] {
    sgd.zero_grad();
    Tensor loss = cross_entropy((*model)(x), labels);
    loss.backward();
    sgd.step();
  };
  for (int i = 0; i < warmup; ++i) step();
  // The captured step reads the labels from the device; SGD's host step counters stay as
  // the warm-up left them (nothing here reads them).
  std::unique_ptr<StepGraph> graph;
  std::shared_ptr<Storage> device_labels;
  if (cuda_graph) {
    device_labels = Storage::allocate(sizeof(int32_t) * labels.size(), device);
    rt.write(device_labels->data(), labels.data(), sizeof(int32_t) * labels.size());
    graph = make_cuda_graph(device);
    graph->capture([&] {
      sgd.zero_grad();
      Tensor loss = cross_entropy((*model)(x), device_labels);
      loss.backward();
      sgd.step();
    });
  }
  if (graph) {
    step = [&] { graph->replay(); };
    for (int i = 0; i < warmup; ++i) step();  // untimed replays first, as PyTorch's graph mode has
  }
  rt.synchronize();
  const long f0 = minor_faults();
  const double c0 = cpu_seconds();
  const TimePoint t0 = Clock::now();
  if (profile) cuda_profiler_range(true);
  for (int i = 0; i < steps; ++i) step();
  rt.synchronize();
  if (profile) cuda_profiler_range(false);
  const double wall = seconds_since(t0);
  return {wall, cpu_seconds() - c0, minor_faults() - f0};
}

int main(int argc, char** argv) {
  std::string which = "both", device_text = "cpu";
  int64_t batch = 128;
  int threads = 1, steps = 0, warmup = 5;
  bool tune_malloc = true, cuda_graph = false, profile = false;
  rf::bench::Flags flags("train_bench", "train_bench [flags]   (samples/s of one training step, single process)");
  flags.text("--model", "mlp|cnn|both", "the reference model(s) (default both)", which)
      .integer("--batch", "batch size (default 128)", batch, 1)
      .integer("--threads", "GEMM threads (default 1)", threads, 1, 1024)
      .integer("--steps", "timed steps (default 200 for the MLP, 40 for the CNN)", steps, 1)
      .integer("--warmup", "untimed steps first (default 5)", warmup, 1)
      .text("--device", "cpu|cuda|cuda:N", "where the model trains (default cpu)", device_text)
      .toggle("--cuda-graph", "on a GPU: the timed steps replay the step captured as a CUDA graph",
              [&] { cuda_graph = true; })
      .toggle("--no-malloc-tuning", "leave glibc's malloc defaults (see core/malloc_tuning.h)",
              [&] { tune_malloc = false; })
      .toggle("--profile", "bracket the timed steps for a profiler (cudaProfilerStart/Stop)", [&] { profile = true; });
  if (const int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  if (which != "mlp" && which != "cnn" && which != "both")
    return flags.fail("--model: '" + which + "' is not mlp, cnn or both");
  Device device;
  try {
    device = parse_device(device_text);
  } catch (const std::exception& e) {
    return flags.fail(std::string("--device: ") + e.what());
  }
  if (cuda_graph && device.is_cpu()) return flags.fail("--cuda-graph: needs --device cuda or cuda:N");
  if (!device.is_cpu()) {
    register_cuda_runtime();
    if (cuda_device_count() <= device.index) {
      std::fprintf(stderr, "train_bench: --device %s: %s\n", device_text.c_str(),
                   cuda_device_count() == 0 ? ("no CUDA device on this machine (" + cuda_unavailable_reason() + ")").c_str()
                                            : "no such CUDA device");
      return 1;
    }
  }
  // Before any training allocation, so the first step's heap is already kept mapped.
  if (tune_malloc && !rf::tune_malloc_for_training())
    std::fprintf(stderr, "train_bench: warning: glibc refused a malloc setting (mallopt)\n");
  kernels::cpu::set_num_threads(threads);
  for (auto kind : {models::ModelKind::MLP, models::ModelKind::CNN}) {
    if (which != "both" && which != models::model_name(kind)) continue;
    const int n = steps > 0 ? steps : (kind == models::ModelKind::MLP ? 200 : 40);
    const BenchResult r = time_steps(kind, batch, n, warmup, device, cuda_graph, profile);
    const std::string on = device.is_cpu() ? "" : " on " + device_name(device);
    std::printf("ringfence %s batch %lld threads %d steps %d%s: %.0f samples/s (%.2f ms/step, "
                "%.2f cpu ms/step, %.2f page faults/step)%s\n",
                models::model_name(kind), static_cast<long long>(batch), threads, n, on.c_str(),
                n * batch / r.seconds, 1000.0 * r.seconds / n, 1000.0 * r.cpu_seconds / n,
                static_cast<double>(r.faults) / n, cuda_graph ? " (cuda graph)" : "");
    std::fflush(stdout);
  }
  return 0;
}
