#pragma once
// Accuracy of a classifier over a whole dataset, under no-grad, in fixed-size batches, on
// the model's device (each batch is copied there; the logits are read back per batch).
#include <cstdint>

#include "core/data/dataset.h"
#include "core/nn/module.h"

namespace rf::models {

struct EvalResult {
  int64_t correct = 0, total = 0;
  double mean_loss = 0.0;
  double accuracy() const { return total ? static_cast<double>(correct) / total : 0.0; }
};

EvalResult evaluate(nn::Module& model, const data::Dataset& ds, int64_t batch = 1000);

}  // namespace rf::models
