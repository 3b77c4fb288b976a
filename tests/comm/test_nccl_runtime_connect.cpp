// NCCL_RUNTIME_CONNECT as the backend sets it (comm/nccl/runtime_connect.h).
#include <doctest/doctest.h>

#include <string>

#include "comm/nccl/runtime_connect.h"

using namespace rf::comm::nccl;

TEST_CASE("runtime connect: 0 (connect at init) unless the user set it") {
  const EnvChoice unset = runtime_connect_env([](const char*) -> const char* { return nullptr; });
  CHECK(unset.name == "NCCL_RUNTIME_CONNECT");
  CHECK(unset.value == "0");
  CHECK_FALSE(unset.kept);
  const std::string line = describe_runtime_connect(unset);
  CHECK_MESSAGE(line.find("NCCL_RUNTIME_CONNECT=0: connections are made at init") == 0, line);

  const EnvChoice user = runtime_connect_env([](const char* n) -> const char* {
    return std::string(n) == "NCCL_RUNTIME_CONNECT" ? "1" : nullptr;
  });
  CHECK(user.kept);
  CHECK(user.existing == "1");
  const std::string kept = describe_runtime_connect(user);
  CHECK_MESSAGE(kept.find("NCCL_RUNTIME_CONNECT=1 (set by the user): connections are made inside each communicator's "
                          "first collective, which counts against the stall bound") == 0, kept);
  const EnvChoice zero = runtime_connect_env([](const char*) -> const char* { return "0"; });
  CHECK(describe_runtime_connect(zero).find("(set by the user): connections are made at init") != std::string::npos);
}
