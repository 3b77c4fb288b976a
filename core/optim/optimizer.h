#pragma once
// Optimizer — updates parameters from their gradients; the ONLY writer of parameters
// (docs/protocol.md R1: the update of step s is where S changes).
//
// Its state is reachable by name so snapshots can save and restore it and the state
// digest can cover it: tensors ("<param>.momentum_buffer", "<param>.exp_avg", ...) and
// integer counters ("<param>.step", the number of updates applied to that parameter).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace rf::optim {

using NamedCounter = std::pair<std::string, int64_t>;

class Optimizer {
 public:
  explicit Optimizer(std::vector<NamedTensor> params);
  virtual ~Optimizer() = default;

  virtual void step() = 0;  // one update of every parameter (under no-grad)
  void zero_grad();

  const std::vector<NamedTensor>& params() const { return params_; }
  virtual std::vector<NamedTensor> named_buffers() const = 0;
  // The algorithm's name ("sgd", "adamw"): snapshots record it (metadata "optimizer") and
  // a restore refuses state written by another algorithm, so every writer must use this.
  virtual const char* kind() const = 0;
  std::vector<NamedCounter> named_counters() const;
  // Restores a counter by name (snapshot load); throws rf::InvalidInput if unknown.
  void set_counter(const std::string& name, int64_t value);

  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }

 protected:
  std::vector<NamedTensor> params_;
  std::vector<int64_t> steps_;  // per parameter
  float lr_ = 0.0f;
};

}  // namespace rf::optim
