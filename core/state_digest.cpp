#include "core/state_digest.h"

#include "core/host_view.h"

namespace rf {
namespace {

void add_tensors(StateDigestBuilder& d, const std::vector<NamedTensor>& ts) {
  d.group(ts.size());
  std::vector<float> scratch;
  for (const auto& [name, t] : ts) d.tensor(name, t.numel(), std::as_bytes(host_view(t, scratch)));
}

}  // namespace

std::string state_digest(const nn::Module& model, const optim::Optimizer& optimizer) {
  StateDigestBuilder d;
  add_tensors(d, model.named_parameters());
  add_tensors(d, optimizer.named_buffers());
  return d.finish(optimizer.named_counters());
}

std::string state_digest(const nn::Module& model) {
  StateDigestBuilder d;
  add_tensors(d, model.named_parameters());
  return d.hex();
}

}  // namespace rf
