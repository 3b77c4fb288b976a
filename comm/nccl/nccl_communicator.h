#pragma once
// The NCCL backend (docs/design.md, "Backends"): a Communicator over one non-blocking NCCL
// communicator (config.blocking = 0) per generation, on one GPU. Made by
// make_communicator(Backend::Nccl, o) once register_cuda_comm() installed it.
//   * Forming: from the generation's ncclUniqueId (comm/nccl/unique_id.h), or with
//     ncclCommShrink from o.previous when ranks only left (comm/nccl/regroup.h).
//   * Waiting: one wait loop polls the operation's event, ncclCommGetAsyncError and our
//     abort flag against the stall deadline; comm/nccl/wait_loop.h decides.
//   * Revoking: ncclCommRevoke (or ncclCommAbort), after which every pending and future
//     operation fails with the same typed errors as the UCX backend's.
//   * NCCL has no tags: the generation is the communicator, and (g, s, op) of every
//     operation is in the flight recorder.
#include <memory>

#include "comm/communicator.h"

namespace rf::comm::nccl {

std::shared_ptr<Communicator> make_nccl_communicator(const CommOptions& o);
void prepare_nccl();

}  // namespace rf::comm::nccl
