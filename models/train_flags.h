#pragma once
// Command-line flags of train_mlp / train_cnn. Every flag takes "--name VALUE" or
// "--name=VALUE" (CLI11, through base/cli.h); an unknown flag or a bad value throws
// FlagError naming it (exit 2).
#include <string>
#include <vector>

#include "base/error.h"
#include "models/train_options.h"

namespace rf::models {

class FlagError : public InvalidInput {
 public:
  using InvalidInput::InvalidInput;
};

struct ParsedFlags {
  TrainOptions options;
  bool help = false;
};

ParsedFlags parse_train_flags(const std::vector<std::string>& args, ModelKind kind);
std::string train_usage(ModelKind kind);

}  // namespace rf::models
