#include "base/log.h"
#include "models/train_program.h"

#include <cstdlib>
#include <exception>
#include <new>
#include <ostream>
#include <string>
#include <utility>

#include "base/str.h"
#include "core/device_runtime.h"
#include "ddp/fault_injector.h"
#include "elastic/fault_spec.h"
#include "elastic/error_file.h"
#include "models/device_choice.h"
#include "models/launch_env.h"
#include "models/train.h"
#include "models/train_flags.h"

namespace rf::models {
namespace {

// The device, and what it asks of this process before training: the test override's
// warning and NCCL environment (models/device_choice.h), gpu_hang's action on a GPU, and the
// refusal of gpu_hang on the CPU. FlagError (exit 2) for everything this worker and every
// restart of it would refuse again.
Device prepare_device(const TrainOptions& opt, const GpuInventory& inventory, bool launched) {
  const auto [slot, incarnation] = launched ? worker_id_from_env() : std::pair<int, int64_t>{0, 0};
  const DeviceChoice choice =
      decide_device({.device = opt.device, .any_gpu = opt.any_gpu, .backend = opt.backend, .gpus = inventory.gpus,
                     .no_gpu_reason = inventory.no_gpu_reason,
                     .local = launched ? std::optional(local_placement_from_env()) : std::nullopt,
                     .nccl_share_gpu = launched && nccl_share_gpu_from(std::getenv(kNcclShareGpuEnv)),
                     .slot = slot,
                     .incarnation = incarnation});
  if (!choice.warning.empty()) rf::log::warn("train", choice.warning);
  // Before any NCCL call (prepare_backend, in training): NCCL reads them once per process.
  for (const auto& [key, value] : choice.env) ::setenv(key.c_str(), value.c_str(), 0);
  const Device device = choice.device;
  if (device.is_cpu()) {
    try {
      elastic::refuse_gpu_faults_on_cpu(elastic::parse_fault_specs(launched ? inject_from_env() : ""));
    } catch (const InvalidInput& e) {
      throw FlagError(str("--inject: ", e.what()));
    }
  } else if (inventory.hang_stream) {
    ddp::set_gpu_hang_action(
        [device, hang = inventory.hang_stream] { hang(device.index, runtime(device, "gpu_hang").stream()); });
  }
  return device;
}

}  // namespace

int run_train_program(TrainOptions opt, const GpuInventory& inventory, std::ostream& out, std::ostream& err) {
  const std::string name = std::string("train_") + model_name(opt.model);
  const bool launched = launched_by_ringfence();
  try {
    // The data-parallel step is not captured: its all-reduces start from hooks inside
    // backward and its control block is read on the host before the optimizer (docs/gpu.md,
    // "The step as a CUDA graph").
    if (launched && opt.cuda_graph)
      throw FlagError("--cuda-graph: only by hand (one process); under ringfence run the step is not captured");
    opt.device = prepare_device(opt, inventory, launched);
  } catch (const FlagError& e) {
    err << (name + ": " + e.what() + "\n") << std::flush;  // one write: workers share the terminal
    // Every worker of this host and every restart would refuse the same way.
    if (launched) stop_job_before_start(e.what(), err);
    return 2;
  }
  try {
    train(opt, out);
  } catch (const std::bad_alloc&) {
    // what() is just "std::bad_alloc": say what it means and what usually causes it.
    const std::string msg = name + ": error: out of memory (is --synthetic or --batch too large for this machine?)";
    err << msg << "\n";
    elastic::report_error_to_launcher(msg);
    return 1;
  } catch (const std::exception& e) {
    const std::string msg = name + ": error: " + e.what();
    err << msg << "\n";
    // Under ringfence run: the launcher's restart policy compares it with the last ones.
    elastic::report_error_to_launcher(msg);
    return 1;
  }
  return 0;
}

}  // namespace rf::models
