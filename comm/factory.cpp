// make_communicator, prepare_backend and allocate_registered: where the backends behind
// comm/communicator.h are chosen. The only file outside comm/ucx/ that names UCX types.
#include <string>

#include "base/error.h"
#include "base/str.h"
#include "comm/communicator.h"
#include "comm/shared_buffer.h"
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

[[noreturn]] void no_nccl(const char* what) {
  throw rf::InvalidInput(rf::str(what, ": this build has no NCCL backend (none is implemented yet); use backend 'ucx' ",
                                 "with host memory"));
}

}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Ucx: return "ucx";
    case Backend::Nccl: return "nccl";
  }
  return "?";
}

Backend parse_backend(std::string_view text) {
  if (text == "ucx") return Backend::Ucx;
  if (text == "nccl") return Backend::Nccl;
  throw rf::InvalidInput(rf::str("comm backend '", text, "' is not one of: ucx, nccl"));
}

void prepare_backend(Backend backend) {
  switch (backend) {
    case Backend::Ucx: (void)ucx_process_context(); return;
    case Backend::Nccl: no_nccl("prepare_backend");
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
      return std::make_shared<UcxCommunicator>(ucx_process_context(), *o.store, o.rank, o.world, o.generation,
                                               std::move(uo));
    }
    case Backend::Nccl: no_nccl("make_communicator");
  }
  throw rf::InvalidInput(rf::str("make_communicator: unknown backend ", static_cast<int>(backend)));
}

std::shared_ptr<RegisteredMemory> allocate_registered(size_t bytes, Device device, int index) {
  if (device == Device::host) return std::make_shared<SharedBuffer>(bytes);
  throw rf::InvalidInput(rf::str("allocate_registered: ", bytes, " bytes on cuda:", index,
                                 ": registered device memory needs a device backend, which this build does not have"));
}

}  // namespace rf::comm
