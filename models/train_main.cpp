// main() of train_mlp and train_cnn (this file is compiled into each program with
// RF_TRAIN_MODEL = MLP or CNN; it is not part of the rf_models library). It owns what is
// process-wide and so must never be done by library code: signal handlers and the global
// flag they set, the GEMM thread count, glibc's malloc settings, and the CUDA halves of core,
// comm and ddp (registered when --device names a GPU; ddp's is gpu_hang's kernel).
#include <csignal>
#include <cstdlib>

#include <atomic>
#include <iostream>
#include <string>
#include <vector>

#include "base/log.h"
#include "comm/cuda/register.h"
#include "core/cuda_graph.h"
#include "core/cuda_runtime.h"
#include "core/malloc_tuning.h"
#include "ddp/gpu_hang.h"
#include "kernels/cpu/gemm.h"
#include "models/launch_env.h"
#include "models/train_flags.h"
#include "models/train_program.h"

namespace {

// Set by SIGTERM / SIGINT; read by the training loop at each step boundary. A signal
// handler can only reach a global, and a lock-free atomic store is async-signal-safe.
std::atomic<bool> g_stop_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void request_stop(int) { g_stop_requested.store(true, std::memory_order_relaxed); }

// SA_RESETHAND: a second Ctrl-C (or TERM) is not caught and ends the process at once.
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rf::models;
  const ModelKind kind = ModelKind::RF_TRAIN_MODEL;
  const std::string name = std::string("train_") + model_name(kind);
  ParsedFlags flags;
  try {
    flags = parse_train_flags(std::vector<std::string>(argv + 1, argv + argc), kind);
  } catch (const FlagError& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 2;
  }
  if (flags.help) {
    std::cout << train_usage(kind);
    return 0;
  }
  rf::kernels::cpu::set_num_threads(flags.options.threads);
  // Freed heap memory stays mapped, so Eigen's per-call GEMM buffers stop re-faulting
  // pages every step (core/malloc_tuning.h); refusal only costs speed.
  if (!rf::tune_malloc_for_training()) rf::log::warn("train", "malloc tuning refused");
  // By hand, SIGTERM / SIGINT is a graceful stop of this process. Under `ringfence run`
  // the launcher owns the graceful stop (Ctrl-C reaches only it; it raises the R5 stop
  // flag for every rank at the same step), so a worker keeps the default dispositions:
  // a signal sent to one worker alone is a failure the launcher recovers from.
  if (!launched_by_ringfence()) {
    install_stop_handlers();
    flags.options.stop_requested = &g_stop_requested;
  }
  GpuInventory inventory;
  if (!flags.options.device.is_cpu()) {
    // CUDA reads it once, when it starts (cuda_device_count, below); a user's value stands.
    try {
      if (launched_by_ringfence() && injects_gpu_hang(inject_from_env())) ::setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    } catch (const FlagError&) {  // a malformed launcher environment: said where it is read again
    }
    rf::register_cuda_runtime();
    rf::comm::register_cuda_comm();
    inventory = {rf::cuda_device_count(), rf::cuda_unavailable_reason(), &rf::ddp::hang_gpu_stream};
    flags.options.make_graph = &rf::make_cuda_graph;
  }
  return run_train_program(flags.options, inventory, std::cout, std::cerr);
}
