// make_communicator, prepare_backend and allocate_registered: where the backends behind
// comm/communicator.h are chosen. The only file outside comm/ucx/ that names UCX types.
// The CUDA halves come in through device_backends() (comm/device_backends.h).
#include <mutex>
#include <string>

#include "base/error.h"
#include "base/str.h"
#include "comm/communicator.h"
#include "comm/device_backends.h"
#include "comm/shm/shared_buffer.h"
#include "comm/ucx/ucx_communicator.h"
#include "comm/ucx/ucx_context.h"

namespace rf::comm {

namespace {

// The process's UCP context, shared by the communicators of every generation. Made on first
// use (a function-local static: thread-safe; a failed create() is retried by the next
// call), released at exit once no communicator holds it.
std::shared_ptr<UcxContext> ucx_process_context() {
  static const std::shared_ptr<UcxContext> context = UcxContext::create();
  return context;
}

std::mutex backends_mu;
DeviceBackends& installed_backends() {
  static DeviceBackends b;
  return b;
}

// Why a CUDA half is missing: the build has none (no CUDA, or for the NCCL backend no
// NCCL), or the program did not install it.
[[noreturn]] void no_cuda_half(const char* what, const char* half, bool needs_nccl = false) {
#if RINGFENCE_HAVE_CUDA
#if !RINGFENCE_HAVE_NCCL
  if (needs_nccl)
    throw rf::InvalidInput(rf::str(what, ": ", half, " needs NCCL, and this build has none (no nccl.h / libnccl was ",
                                   "found when it was configured; set RINGFENCE_NCCL_ROOT); use backend 'ucx', which ",
                                   "stages device buffers through pinned host memory"));
#endif
  (void)needs_nccl;
  throw rf::InvalidInput(rf::str(what, ": ", half, " is not registered in this program (it must link rf_comm_cuda and ",
                                 "call rf::comm::register_cuda_comm())"));
#else
  (void)needs_nccl;
  throw rf::InvalidInput(rf::str(what, ": ", half, " needs CUDA, and this build has none (no nvcc was found when it was ",
                                 "configured); use backend 'ucx' with host memory"));
#endif
}

}  // namespace

const char* backend_name(Backend b) { return name_of(kBackendNames, b); }

Backend parse_backend(std::string_view text) {
  if (const auto b = parse_enum(kBackendNames, text)) return *b;
  throw rf::InvalidInput(rf::str("comm backend '", text, "' is not one of: ucx, nccl"));
}

void set_device_backends(const DeviceBackends& b) {
  std::lock_guard<std::mutex> lk(backends_mu);
  installed_backends() = b;
}

DeviceBackends device_backends() {
  std::lock_guard<std::mutex> lk(backends_mu);
  return installed_backends();
}

void prepare_backend(Backend backend) {
  switch (backend) {
    case Backend::Ucx: (void)ucx_process_context(); return;
    case Backend::Nccl: {
      const DeviceBackends b = device_backends();
      if (!b.prepare_nccl) no_cuda_half("prepare_backend", "the NCCL backend", true);
      b.prepare_nccl();
      return;
    }
  }
}

std::shared_ptr<Communicator> make_communicator(Backend backend, const CommOptions& o) {
  if (o.store == nullptr) throw rf::InvalidInput("make_communicator: no bootstrap store (CommOptions::store is null)");
  switch (backend) {
    case Backend::Ucx: {
      UcxOptions uo;
      uo.stall_timeout = o.stall_timeout;
      uo.connect_timeout = o.connect_timeout;
      uo.flight_recorder_path = o.flight_recorder_path;
      uo.on_chunk = o.on_chunk;
      uo.tag_key = o.tag_key;
      // Checked before connecting, so a missing half costs no peer a timeout.
      const DeviceBackends b = device_backends();
      if (o.device == Device::cuda && !b.stage_device_buffers)
        no_cuda_half("make_communicator", "the UCX backend's staging of device buffers");
      auto host = std::make_shared<UcxCommunicator>(ucx_process_context(), *o.store, o.rank, o.world, o.generation,
                                                    std::move(uo));
      if (o.device == Device::host) return host;
      return b.stage_device_buffers(std::move(host), o);
    }
    case Backend::Nccl: {
      if (o.device != Device::cuda)
        throw rf::InvalidInput("make_communicator: the NCCL backend needs a GPU (CommOptions::device = cuda)");
      const DeviceBackends b = device_backends();
      if (!b.make_nccl) no_cuda_half("make_communicator", "the NCCL backend", true);
      return b.make_nccl(o);
    }
  }
  throw rf::InvalidInput(rf::str("make_communicator: unknown backend ", static_cast<int>(backend)));
}

std::shared_ptr<RegisteredMemory> allocate_registered(size_t bytes, Device device, int index) {
  if (device == Device::host) return std::make_shared<SharedBuffer>(bytes);
  const DeviceBackends b = device_backends();
  if (!b.allocate_device) no_cuda_half(rf::str("allocate_registered: ", bytes, " bytes on cuda:", index).c_str(),
                                       "registered device memory");
  return b.allocate_device(bytes, index);
}

}  // namespace rf::comm
