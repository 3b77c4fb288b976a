// GraphStep (models/graph_step.h): the eager step, and its capture and replay.
#include "models/graph_step.h"

#include <cstring>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "core/device_runtime.h"
#include "core/ops.h"
#include "kernels/op_table.h"
#include "models/train_setup.h"

namespace rf::models {
namespace {

// FNV-1a over 64-bit words.
uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}
constexpr uint64_t kFnvBasis = 14695981039346656037ull;

}  // namespace

GraphStep::GraphStep(nn::Module& model, optim::SGD& sgd, Device device, int classes, StepGraphFactory make_graph)
    : model_(model),
      sgd_(sgd),
      device_(device),
      classes_(classes),
      make_graph_(make_graph),
      policy_(make_graph_ != nullptr),
      divisor_(Storage::allocate(sizeof(float), device)) {}

GraphStep::~GraphStep() {
  try {
    drop();
  } catch (const Error&) {
    // a destructor does not throw; the device's error shows again at its next checked call
  }
}

// What the graph baked in: the batch's shape, the addresses of the parameters, their
// gradients and the momentum, the learning rate, and whether SGD is past its first step.
GraphKey GraphStep::key_of(const Tensor& x) const {
  GraphKey k;
  for (int i = 0; i < x.dim(); ++i) k.input_shape.push_back(x.size(i));
  k.generation = generation_;
  uint64_t h = kFnvBasis;
  bool warm = true;
  for (const auto& [name, p] : sgd_.params()) {
    h = mix(h, reinterpret_cast<uintptr_t>(p.data()));
    h = mix(h, reinterpret_cast<uintptr_t>(p.impl().grad ? p.impl().grad_data() : nullptr));
  }
  for (const auto& [name, b] : sgd_.named_buffers()) h = mix(h, reinterpret_cast<uintptr_t>(b.data()));
  for (const auto& [name, count] : sgd_.named_counters()) warm = warm && count > 0;
  k.state_layout = h;
  uint32_t lr_bits = 0;
  const float lr = sgd_.lr();
  std::memcpy(&lr_bits, &lr, sizeof lr_bits);
  k.hyper = lr_bits;
  k.optimizer_warm = warm;
  return k;
}

Tensor GraphStep::run(const Tensor& x, std::span<const int32_t> labels) {
  const GraphDecision d = policy_.decide(key_of(x));
  if (d.drop) drop();
  if (d.run == GraphRun::Replay) {
    write_inputs(x, labels);
    graph_->replay();
    sgd_.count_replayed_step();
    ++counts_.replays;
    return loss_;
  }
  if (d.run == GraphRun::Eager) return eager(x, labels);

  // Capture: the inputs' buffers first (outside the capture: the graph keeps them), then
  // the step as eager() issues it, then one launch of it for this step.
  in_x_ = Tensor::empty(x.shape(), device_);
  in_labels_ = Storage::allocate(sizeof(int32_t) * labels.size(), device_);
  write_inputs(x, labels);
  const auto counters = sgd_.named_counters();
  try {
    if (!graph_) graph_ = make_graph_(device_);
    graph_->capture([this] {
      sgd_.zero_grad();
      Tensor logits = model_(in_x_);
      if (logits.dim() != 2 || logits.size(1) != classes_)
        throw InvalidInput(str("--cuda-graph: the model gives ", logits.shape().str(), " for ", classes_, " classes"));
      loss_ = cross_entropy(logits, in_labels_, Reduction::Sum);
      loss_.backward();
      divide_gradients();
      sgd_.step();
    });
  } catch (const Error& e) {
    // Nothing ran on the device; only the host's step counters moved.
    for (const auto& [name, count] : counters) sgd_.set_counter(name, count);
    drop();
    policy_.capture_failed();
    log::warn("train", "--cuda-graph: the step could not be captured, training on without the graph: ", e.what());
    return eager(x, labels);
  }
  graph_->replay();
  ++counts_.captures;
  return loss_;
}

// The step as the trainer issues it at W = 1: the batch copied to the device, then each op.
Tensor GraphStep::eager(const Tensor& x, std::span<const int32_t> labels) {
  ++counts_.eager;
  const Tensor on_device = x.to(device_);
  const float size = static_cast<float>(labels.size());
  runtime(device_, "graph step").write(divisor_->data(), &size, sizeof size);
  sgd_.zero_grad();
  Tensor loss = classification_loss(model_(on_device), labels, Reduction::Sum);
  loss.backward();
  divide_gradients();
  sgd_.step();
  return loss;
}

void GraphStep::write_inputs(const Tensor& x, std::span<const int32_t> labels) {
  check_class_labels(labels, classes_);
  DeviceRuntime& rt = runtime(device_, "--cuda-graph");
  rt.write(in_x_.data(), x.data(), sizeof(float) * static_cast<size_t>(x.numel()));
  rt.write(in_labels_->data(), labels.data(), sizeof(int32_t) * labels.size());
  const float size = static_cast<float>(labels.size());
  rt.write(divisor_->data(), &size, sizeof size);
}

// The reducer's division (ddp/reducer.cpp: divide_by, the divisor read on the device), on
// each parameter's gradient: elementwise, so the bits of dividing the whole bucket.
void GraphStep::divide_gradients() {
  DeviceRuntime& rt = runtime(device_, "graph step");
  const float* divisor = divisor_->data<float>();
  for (const auto& [name, p] : sgd_.params())
    rt.ops().divide_by(rt.exec(), p.numel(), divisor, p.impl().grad_data());
}

// The tensors the graph wrote go first (their blocks return to its pool), then the graph
// and its pool.
void GraphStep::drop() {
  loss_ = Tensor();
  in_x_ = Tensor();
  in_labels_.reset();
  if (graph_) graph_->reset();
}

}  // namespace rf::models
