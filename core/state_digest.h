#pragma once
// state_digest(model, optimizer) — 32 hex characters over every parameter and optimizer
// buffer and counter, names included, in a fixed order (parameters in registration order,
// then buffers, then counters). Two replicas or two runs have the same digest iff their
// states are bitwise equal (up to hash collisions); see docs/protocol.md recovery 4 and 7.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/digest.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace rf {

std::string state_digest(const nn::Module& model, const optim::Optimizer& optimizer);
std::string state_digest(const nn::Module& model);  // parameters only

// The digest's format, step by step — the one definition, used by state_digest above and
// by ckpt's restore_state, which hashes an image's bytes instead of the live tensors:
//   group(number of parameters), then tensor(name, numel, data) for each;
//   group(number of buffers), then tensor(...) for each;
//   finish(counters): their count, then each one's name and value.
class StateDigestBuilder {
 public:
  void group(size_t count) { d_.update_u64(count); }
  void tensor(const std::string& name, int64_t numel, std::span<const std::byte> data) {
    d_.update_str(name);
    d_.update_u64(static_cast<uint64_t>(numel));
    d_.update(data);
  }
  std::string finish(const std::vector<std::pair<std::string, int64_t>>& counters) {
    d_.update_u64(counters.size());
    for (const auto& [name, v] : counters) {
      d_.update_str(name);
      d_.update_u64(static_cast<uint64_t>(v));
    }
    return d_.hex();
  }
  std::string hex() const { return d_.hex(); }

 private:
  StateDigest d_;
};

}  // namespace rf
