// Which NCCL library a build of the backend runs with (comm/nccl/version.h).
#include <doctest/doctest.h>

#include <string>

#include "comm/nccl/version.h"

using namespace rf::comm::nccl;

TEST_CASE("nccl version: revoke needs 2.28.7 and shrink 2.27.3, as their first releases") {
  CHECK(nccl_library_needed(22809) == 22807);
  CHECK(nccl_library_needed(22807) == 22807);
  CHECK(nccl_library_needed(22803) == 22703);  // 2.28.3's header has no ncclCommRevoke
  CHECK(nccl_library_needed(22703) == 22703);
  CHECK(nccl_library_needed(22605) == 0);
  CHECK(nccl_version_text(22809) == "2.28.9");
}

TEST_CASE("nccl version: a library older than what the header promised is refused, by name") {
  CHECK(nccl_library_refusal(22809, 22809).empty());
  CHECK(nccl_library_refusal(22900, 22809).empty());  // newer: fine (logged elsewhere)
  CHECK(nccl_library_refusal(22807, 22809).empty());
  const std::string why = nccl_library_refusal(22803, 22809);
  CHECK_MESSAGE(why.find("the NCCL library loaded is 2.28.3, older than 2.28.7, the first with ncclCommRevoke") !=
                    std::string::npos, why);
  CHECK(why.find("NCCL 2.28.9's header") != std::string::npos);
  CHECK(nccl_library_refusal(22605, 22803).find("ncclCommShrink") != std::string::npos);
  CHECK(nccl_library_refusal(22605, 22605).empty());
}
