#include "models/launch_env.h"

#include <ostream>
#include <utility>

#include "base/str.h"
#include "elastic/client.h"
#include "elastic/errors.h"
#include "elastic/fault_spec.h"
#include "elastic/worker_env.h"
#include "models/train_flags.h"

namespace rf::models {
namespace {

// The launcher's environment, read once (elastic/worker_env.h); a malformed value is a
// FlagError (exit 2: every restart would meet it again).
const elastic::WorkerEnv& worker_env() {
  static const elastic::WorkerEnv env = [] {
    try {
      return elastic::read_worker_env();
    } catch (const InvalidInput& e) {
      throw FlagError(e.what());
    }
  }();
  return env;
}

}  // namespace

LocalPlacement local_placement_from_env() {
  return {.local_rank = worker_env().local_rank, .local_world = worker_env().local_world};
}

std::pair<int, int64_t> worker_id_from_env() { return {worker_env().slot, worker_env().incarnation}; }

bool job_ran_from_env() { return worker_env().job_ran; }

std::string inject_from_env() { return worker_env().inject; }

bool injects_gpu_hang(const std::string& inject) {
  try {
    for (const elastic::FaultSpec& f : elastic::parse_fault_specs(inject))
      if (f.kind == elastic::FaultKind::GpuHang) return true;
  } catch (const InvalidInput&) {
  }
  return false;
}

void stop_job_before_start(const std::string& error, std::ostream& err) {
  try {
    elastic::Client client(elastic::ClientOptions::from_env());
    client.join();
    client.fatal(error);
    client.close();
  } catch (const elastic::Refused&) {
    // The join refused: the job is STOPPED already, by another worker's same report (the
    // launcher prints it), or this worker may not join at all (the start-up rule ends it).
  } catch (const std::exception& e) {
    err << "ringfence worker: could not tell the coordinator: " << e.what() << "\n" << std::flush;
  }
}

}  // namespace rf::models
