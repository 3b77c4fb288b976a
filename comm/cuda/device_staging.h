#pragma once
// The UCX fallback for device buffers (docs/design.md, "Backends": Debian's UCX has no CUDA
// transports). A Communicator that wraps the generation's host communicator: a collective
// on a device buffer copies it into pinned, pre-allocated host staging on the caller's
// stream, runs the host collective on the staging once that copy is done, and copies the
// result back on the same stream before its Work finishes (the stream contract of
// comm/communicator.h). Host buffers, point-to-point blobs, barriers and every seam
// (abort, abort_failed, inject_drop, the stall timeout) go straight to the inner one.
#include <memory>

#include "comm/communicator.h"

namespace rf::comm::cuda {

// Throws rf::InvalidInput when o.device is not Device::cuda or `host` is null.
std::shared_ptr<Communicator> stage_device_buffers(std::shared_ptr<Communicator> host, const CommOptions& o);

}  // namespace rf::comm::cuda
