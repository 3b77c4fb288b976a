#pragma once
// state_digest(model, optimizer) — 32 hex characters over every parameter and optimizer
// buffer and counter, names included, in a fixed order (parameters in registration order,
// then buffers, then counters). Two replicas or two runs have the same digest iff their
// states are bitwise equal (up to hash collisions); see PROTOCOL.md recovery 4 and 7.
#include <string>

#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace rf {

std::string state_digest(const nn::Module& model, const optim::Optimizer& optimizer);
std::string state_digest(const nn::Module& model);  // parameters only

}  // namespace rf
