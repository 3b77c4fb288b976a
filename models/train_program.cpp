#include "models/train_program.h"

#include <iostream>
#include <string>
#include <vector>

#include "models/train_flags.h"
#include "models/train_loop.h"

namespace rf::models {

int train_program_main(int argc, char** argv, ModelKind kind) {
  const std::string name = std::string("train_") + model_name(kind);
  ParsedFlags flags;
  try {
    flags = parse_train_flags(std::vector<std::string>(argv + 1, argv + argc), kind);
  } catch (const FlagError& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 2;
  }
  if (flags.help) {
    std::cout << train_usage(kind);
    return 0;
  }
  try {
    train(flags.options, std::cout);
  } catch (const std::exception& e) {
    std::cerr << name << ": error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace rf::models
