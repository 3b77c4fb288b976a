#pragma once
// DataError — a dataset file is missing, truncated or malformed. The message names the
// file and the problem (and the byte offset or field where one applies), so a user can
// tell a bad download from a wrong --data-dir without a debugger.
#include "base/error.h"

namespace rf::data {

class DataError : public rf::InvalidInput {
 public:
  using rf::InvalidInput::InvalidInput;
};

}  // namespace rf::data
