#include "core/autograd.h"

#include <unordered_map>

#include "base/enforce.h"
#include "core/device_runtime.h"
#include "kernels/op_table.h"

namespace rf {
namespace {

thread_local bool g_grad_enabled = true;

void fill_grad(TensorImpl& t, int64_t n, float value) {
  DeviceRuntime& r = runtime(t.device, "backward");
  r.ops().fill(r.exec(), n, value, t.grad_data());
}

void ensure_zeroed_grad(TensorImpl& t) {
  if (t.grad) return;
  t.grad = Storage::allocate(sizeof(float) * static_cast<size_t>(t.numel()), t.device);
  t.grad_offset = 0;
  fill_grad(t, t.numel(), 0.0f);
}

void fire_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (leaf->hooks.empty()) return;
  Tensor handle(leaf);
  for (auto& h : leaf->hooks) h(handle);
}

}  // namespace

bool grad_enabled() { return g_grad_enabled; }

float* grad_of(const std::shared_ptr<TensorImpl>& t) {
  if (!t->requires_grad) return nullptr;
  if (t->grad_fresh) {
    fill_grad(*t, t->numel(), 0.0f);
    t->grad_fresh = false;
  }
  return t->grad_data();
}

GradOut grad_out(const std::shared_ptr<TensorImpl>& t) {
  if (!t->requires_grad) return {};
  GradOut g{t->grad_data(), t->grad_fresh};
  t->grad_fresh = false;  // the rule now owns writing every element
  return g;
}

NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }

Tensor make_result(const Shape& shape, const char* op, const std::vector<Tensor>& inputs,
                   BackwardFn rule, Device device) {
  Tensor out = Tensor::empty(shape, device);
  if (!g_grad_enabled) return out;
  bool any = false;
  for (const Tensor& in : inputs) any = any || (in.defined() && in.requires_grad());
  if (!any) return out;
  TensorImpl& o = out.impl();
  o.requires_grad = true;
  o.op = op;
  o.backward = std::move(rule);
  o.inputs.reserve(inputs.size());
  for (const Tensor& in : inputs)
    if (in.defined()) o.inputs.push_back(in.impl_ptr());
  return out;
}

void run_backward(const Tensor& root_t) {
  const std::shared_ptr<TensorImpl>& root = root_t.impl_ptr();
  RF_ENFORCE(root != nullptr, "backward of an undefined tensor");
  if (root->numel() != 1)
    throw InvalidInput(str("backward() needs a scalar (1 element), got shape ", root->shape.str()));
  if (!root->requires_grad)
    throw InvalidInput("backward() on a tensor that does not require grad (no graph was recorded)");

  // Reverse topological order by an iterative DFS (graphs can be deep; no recursion).
  std::vector<std::shared_ptr<TensorImpl>> order;
  std::unordered_map<TensorImpl*, int> pending;  // leaf -> uses not yet contributed
  {
    std::unordered_map<TensorImpl*, bool> seen;
    std::vector<std::pair<std::shared_ptr<TensorImpl>, size_t>> stack{{root, 0}};
    seen[root.get()] = true;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        std::shared_ptr<TensorImpl> in = node->inputs[next++];
        if (!in->requires_grad) continue;
        if (in->is_leaf()) ++pending[in.get()];
        if (!seen[in.get()]) {
          seen[in.get()] = true;
          stack.emplace_back(std::move(in), 0);
        }
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }

  // The seed: d root / d root = 1, added to a fresh zero gradient (a root that is a leaf
  // with a gradient already keeps accumulating into it).
  if (!root->grad) {
    ensure_zeroed_grad(*root);
    fill_grad(*root, 1, 1.0f);
  } else {
    DeviceRuntime& r = runtime(root->device, "backward");
    float one = 1.0f;
    auto seed = Storage::allocate(sizeof(float), root->device);
    r.write(seed->data(), &one, sizeof(float));
    r.ops().accumulate(r.exec(), 1, seed->data(), root->grad_data(), true);
  }
  if (root->is_leaf()) {
    fire_hooks(root);
    return;
  }

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    TensorImpl& node = **it;
    if (node.is_leaf()) continue;
    if (node.graph_freed)
      throw Error(str("backward through op '", node.op,
                      "' whose graph was already freed by an earlier backward()"));
    if (!node.backward)
      throw Error(str("no derivative rule for op '", node.op, "'"));
    for (auto& in : node.inputs) {
      if (!in->requires_grad || in->grad) continue;
      int uses_here = 0;
      for (auto& other : node.inputs) uses_here += other == in;
      // A leaf's gradient accumulates across backward calls, and an input used twice by
      // this op gets two contributions: both need real zeros. Otherwise this rule is the
      // first writer and may overwrite (see grad_out).
      if (in->is_leaf() || uses_here > 1) {
        ensure_zeroed_grad(*in);
      } else {
        in->grad = Storage::allocate(sizeof(float) * static_cast<size_t>(in->numel()), in->device);
        in->grad_offset = 0;
        in->grad_fresh = true;
      }
    }
    node.backward(node);
    for (auto& in : node.inputs) grad_of(in);  // a fresh gradient the rule did not touch is 0
    for (auto& in : node.inputs) {
      if (!in->requires_grad || !in->is_leaf()) continue;
      if (--pending[in.get()] == 0) fire_hooks(in);
    }
    // Free this node's part of the graph now: its gradient and the inputs' saved buffers
    // return to the caching allocator while backward continues.
    node.backward = nullptr;
    node.inputs.clear();
    node.graph_freed = true;
    node.grad.reset();
  }
}

}  // namespace rf
