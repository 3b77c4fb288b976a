#include "core/state_digest.h"

#include "base/digest.h"

namespace rf {
namespace {

void add_tensors(StateDigest& d, const std::vector<NamedTensor>& ts) {
  d.update_u64(ts.size());
  for (const auto& [name, t] : ts) {
    d.update_str(name);
    d.update_u64(static_cast<uint64_t>(t.numel()));
    d.update(t.data(), sizeof(float) * static_cast<size_t>(t.numel()));
  }
}

}  // namespace

std::string state_digest(const nn::Module& model, const optim::Optimizer& optimizer) {
  StateDigest d;
  add_tensors(d, model.named_parameters());
  add_tensors(d, optimizer.named_buffers());
  const auto counters = optimizer.named_counters();
  d.update_u64(counters.size());
  for (const auto& [name, v] : counters) {
    d.update_str(name);
    d.update_u64(static_cast<uint64_t>(v));
  }
  return d.hex();
}

std::string state_digest(const nn::Module& model) {
  StateDigest d;
  add_tensors(d, model.named_parameters());
  return d.hex();
}

}  // namespace rf
