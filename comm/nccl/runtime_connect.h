#pragma once
// NCCL_RUNTIME_CONNECT, decided (pure: the shell applies it, nccl_form.cpp). NCCL 2.28.9
// defaults it to 1 where cuMem is supported: a communicator's ring connections are made
// inside its first collective, on NCCL's launch thread, so that collective answers
// ncclInProgress for as long as connecting takes, and that time counts against our stall
// bound (D3) at every generation's first all-reduce. The backend sets it to 0, once per
// process and only where the user has not set it: connections are made during
// ncclCommInitRankConfig (or ncclCommShrink), inside the connect timeout instead. A value
// the user set is kept and logged.
#include <functional>
#include <string>

#include "comm/nccl/determinism.h"

namespace rf::comm::nccl {

// What to set: NCCL_RUNTIME_CONNECT=0, or the user's value kept. `getenv` reads the environment.
EnvChoice runtime_connect_env(const std::function<const char*(const char*)>& getenv);

// One log line saying when connections are made, and whether the user chose it.
std::string describe_runtime_connect(const EnvChoice& choice);

}  // namespace rf::comm::nccl
