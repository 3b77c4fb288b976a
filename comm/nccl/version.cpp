#include "comm/nccl/version.h"

#include "base/str.h"

namespace rf::comm::nccl {

int nccl_library_needed(int header) {
  if (header >= kNcclRevokeVersion) return kNcclRevokeVersion;
  if (header >= kNcclShrinkVersion) return kNcclShrinkVersion;
  return 0;
}

std::string nccl_version_text(int code) { return rf::str(code / 10000, ".", code / 100 % 100, ".", code % 100); }

std::string nccl_library_refusal(int library, int header) {
  const int needed = nccl_library_needed(header);
  if (library >= needed) return "";
  return rf::str("NCCL backend: the NCCL library loaded is ", nccl_version_text(library), ", older than ",
                 nccl_version_text(needed), ", the first with ",
                 needed == kNcclRevokeVersion ? "ncclCommRevoke" : "ncclCommShrink", ", which this build (against NCCL ",
                 nccl_version_text(header), "'s header) calls during recovery: put NCCL ", nccl_version_text(needed),
                 " or newer first on the library path, or rebuild against the NCCL you have");
}

}  // namespace rf::comm::nccl
