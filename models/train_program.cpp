#include "models/train_program.h"

#include <exception>
#include <new>
#include <ostream>
#include <string>

#include "models/distributed_train.h"

namespace rf::models {

int run_train_program(const TrainOptions& opt, std::ostream& out, std::ostream& err) {
  const std::string name = std::string("train_") + model_name(opt.model);
  try {
    if (launched_by_ringfence())
      train_distributed(opt, out);
    else
      train(opt, out);
  } catch (const std::bad_alloc&) {
    // what() is just "std::bad_alloc": say what it means and what usually causes it.
    err << name << ": error: out of memory (is --synthetic or --batch too large for this machine?)\n";
    return 1;
  } catch (const std::exception& e) {
    err << name << ": error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace rf::models
