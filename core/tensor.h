#pragma once
// Tensor — a float32, contiguous, row-major array of up to 4 dimensions with a device tag,
// and the node of the autograd graph that produced it (micrograd's Value, one tensor wide).
//
// A Tensor is a cheap handle (shared_ptr) to a TensorImpl; copies alias. Data lives in a
// Storage at an offset, so reshape/flatten of contiguous data are views that share it.
// A leaf with requires_grad is a parameter: its gradient lives in grad storage that can be
// pointed at externally owned memory (set_grad_view); backward accumulates into it in
// place and never reallocates it.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/shape.h"
#include "core/storage.h"

namespace rf {

class Tensor;
struct TensorImpl;
// Called once per backward, when the parameter's gradient is final (every use in the
// graph has contributed). The ddp reducer marks the parameter ready in its bucket here.
using GradHook = std::function<void(const Tensor& param)>;
// A derivative rule: reads out.grad, ACCUMULATES (+=) into each input's grad.
using BackwardFn = std::function<void(TensorImpl& out)>;

struct TensorImpl {
  Shape shape;
  Device device = Device::CPU;
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in floats
  bool requires_grad = false;
  std::shared_ptr<Storage> grad;  // null until needed
  int64_t grad_offset = 0;
  // Set by the engine on a newly allocated intermediate gradient whose only consumer is
  // about to run: the buffer holds garbage and that rule's first write overwrites it.
  bool grad_fresh = false;
  // Graph (non-leaf only): the op's name, its inputs, and its derivative rule.
  const char* op = nullptr;
  std::vector<std::shared_ptr<TensorImpl>> inputs;
  BackwardFn backward;
  bool graph_freed = false;
  std::vector<GradHook> hooks;  // leaves only

  float* data() const { return storage->data<float>() + offset; }
  float* grad_data() const { return grad ? grad->data<float>() + grad_offset : nullptr; }
  int64_t numel() const { return shape.numel(); }
  bool is_leaf() const { return op == nullptr; }
};

class Tensor {
 public:
  Tensor() = default;  // undefined (e.g. "no bias")
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  static Tensor empty(const Shape& shape, Device device = Device::CPU);  // uninitialised
  static Tensor zeros(const Shape& shape, Device device = Device::CPU);
  static Tensor full(const Shape& shape, float value, Device device = Device::CPU);
  // Copies host values into a new tensor on `device`.
  static Tensor from(const Shape& shape, std::span<const float> values, Device device = Device::CPU);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int dim() const { return shape().ndim(); }
  int64_t size(int i) const { return shape()[i]; }
  int64_t numel() const { return shape().numel(); }
  Device device() const { return impl().device; }
  float* data() const { return impl().data(); }
  std::span<float> values() const { return {data(), static_cast<size_t>(numel())}; }
  // data() is memory of device(): host memory only on the CPU (core/host_view.h reads any).
  float item() const;  // the value of a 1-element tensor: a blocking read (DeviceRuntime)
  // The same values on `device`: *this when already there, else a copy (through host
  // memory, blocking) with no graph.
  Tensor to(Device device) const;

  // Autograd.
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool on);  // leaves only
  bool is_leaf() const { return impl().is_leaf(); }
  const char* op() const { return impl().op; }
  Tensor grad() const;  // a view of the gradient (undefined before any backward)
  void zero_grad();     // fills the gradient with 0 (allocates it if absent)
  // Points this leaf's gradient at external memory of exactly numel() floats; backward
  // accumulates there from now on. Existing gradient values are not copied.
  void set_grad_view(std::shared_ptr<Storage> storage, int64_t offset_floats);
  void set_grad_view(float* data, int64_t numel);
  void register_hook(GradHook hook);  // leaves with requires_grad only
  void backward() const;              // from a 1-element tensor; frees the graph
  Tensor detach() const;              // same data, no graph

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  std::string str() const;  // "Tensor[2, 3] cpu" (+ " op=matmul")

 private:
  std::shared_ptr<TensorImpl> impl_;
};

using NamedTensor = std::pair<std::string, Tensor>;

}  // namespace rf
