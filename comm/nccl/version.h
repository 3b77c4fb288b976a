#pragma once
// Which NCCL a build of the backend needs (pure: no nccl.h). Versions are NCCL_VERSION_CODE
// values (2.28.9 = 22809). ncclCommShrink came with 2.27.3 and ncclCommRevoke with 2.28.7:
// the backend uses each when the header it was compiled against has it (nccl_impl.h), and
// then refuses, at start, a library older than that header's first release with it.
#include <string>

namespace rf::comm::nccl {

inline constexpr int kNcclShrinkVersion = 22703;
inline constexpr int kNcclRevokeVersion = 22807;

// The oldest library a build against `header` can run with (0: any).
int nccl_library_needed(int header);

// Why the library `library` cannot run a build against `header` ("" when it can): it names
// both versions, the function that would be missing, and what to do.
std::string nccl_library_refusal(int library, int header);

// "2.28.9" for 22809.
std::string nccl_version_text(int code);

}  // namespace rf::comm::nccl
