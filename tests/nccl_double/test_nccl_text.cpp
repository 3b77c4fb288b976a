// How the NCCL backend words NCCL's errors (comm/nccl/nccl_impl.h, nccl_text), against the
// double: ncclGetLastError is NCCL's last warning anywhere in the process (one buffer, never
// cleared), so it is shown once, with the first error formatted after it changed, and
// named as what it is, never as this call's cause.
#include <doctest/doctest.h>

#include <nccl.h>

#include <string>

#include "comm/nccl/nccl_impl.h"

TEST_CASE("nccl_text: NCCL's process-wide last warning is shown once, named as such") {
  using rf::comm::nccl::nccl_text;
  int somewhere = 0;
  const auto comm = reinterpret_cast<ncclComm_t>(&somewhere);  // nccl_text only names it
  CHECK(ncclCommFinalize(nullptr) == ncclInvalidArgument);    // a warning in NCCL's buffer
  const std::string first = nccl_text(comm, ncclInternalError);
  CHECK_MESSAGE(first.find("NCCL error 3: internal error (fake NCCL) (NCCL's last warning in this process: "
                           "ncclCommFinalize: not a live communicator)") == 0,
                first);
  // Still in the buffer, but not this error's: not shown again.
  CHECK(nccl_text(comm, ncclSystemError) == std::string("NCCL error 2: ") + ncclGetErrorString(ncclSystemError));
  int count = 0;
  CHECK(ncclCommCount(nullptr, &count) == ncclInvalidArgument);  // a new warning: shown, once
  CHECK(nccl_text(comm, ncclInternalError, false).find("ncclCommCount: not a live communicator") !=
        std::string::npos);
  CHECK(nccl_text(comm, ncclInternalError, false) == "internal error (fake NCCL)");
  CHECK(nccl_text(nullptr, ncclInternalError, false) == "internal error (fake NCCL)");  // no communicator: none
}
