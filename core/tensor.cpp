#include "core/tensor.h"

#include "base/enforce.h"
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "kernels/op_table.h"

namespace rf {

Tensor Tensor::empty(const Shape& shape, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->device = device;
  impl->storage = Storage::allocate(sizeof(float) * static_cast<size_t>(shape.numel()), device);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, Device device) { return full(shape, 0.0f, device); }

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, device);
  DeviceRuntime& r = runtime(device, "Tensor::full");
  r.ops().fill(r.exec(), t.numel(), value, t.data());
  return t;
}

Tensor Tensor::from(const Shape& shape, std::span<const float> values, Device device) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    throw InvalidInput(rf::str("Tensor::from: shape ", shape.str(), " needs ", shape.numel(),
                           " values, got ", values.size()));
  Tensor t = empty(shape, device);
  if (!values.empty()) runtime(device, "Tensor::from").write(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

TensorImpl& Tensor::impl() const {
  RF_ENFORCE(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}

float Tensor::item() const {
  if (numel() != 1) throw InvalidInput(rf::str("item() needs 1 element, tensor has shape ", shape().str()));
  float v = 0.0f;
  runtime(device(), "Tensor::item").read(&v, data(), sizeof(float));
  return v;
}

Tensor Tensor::to(Device target) const {
  if (device() == target) return *this;
  const size_t bytes = sizeof(float) * static_cast<size_t>(numel());
  Tensor t = empty(shape(), target);
  if (bytes == 0) return t;
  DeviceRuntime& src = runtime(device(), "Tensor::to");
  DeviceRuntime& dst = runtime(target, "Tensor::to");
  // Host memory is the bridge: a CPU end is used directly, else a staging block.
  if (device().is_cpu()) {
    dst.write(t.data(), data(), bytes);
  } else if (target.is_cpu()) {
    src.read(t.data(), data(), bytes);
  } else {
    void* host = src.host_staging(bytes);
    try {
      src.read(host, data(), bytes);
      dst.write(t.data(), host, bytes);
    } catch (...) {
      src.free_host_staging(host, bytes);
      throw;
    }
    src.free_host_staging(host, bytes);
  }
  return t;
}

Tensor& Tensor::set_requires_grad(bool on) {
  if (!is_leaf())
    throw InvalidInput(rf::str("set_requires_grad on the result of op '", op(), "': only leaves"));
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = impl();
  if (!t.grad) return Tensor();
  auto g = std::make_shared<TensorImpl>();
  g->shape = t.shape;
  g->device = t.device;
  g->storage = t.grad;
  g->offset = t.grad_offset;
  return Tensor(std::move(g));
}

void Tensor::zero_grad() {
  TensorImpl& t = impl();
  if (!t.grad) {
    t.grad = Storage::allocate(sizeof(float) * static_cast<size_t>(t.numel()), t.device);
    t.grad_offset = 0;
  }
  DeviceRuntime& r = runtime(t.device, "zero_grad");
  r.ops().fill(r.exec(), t.numel(), 0.0f, t.grad_data());
}

void Tensor::set_grad_view(std::shared_ptr<Storage> storage, int64_t offset_floats) {
  TensorImpl& t = impl();
  RF_ENFORCE(storage != nullptr, "set_grad_view: null storage");
  const size_t need = sizeof(float) * static_cast<size_t>(offset_floats + t.numel());
  if (offset_floats < 0 || storage->bytes() < need)
    throw InvalidInput(rf::str("set_grad_view: storage of ", storage->bytes(), " bytes cannot hold ",
                           t.numel(), " floats at offset ", offset_floats));
  if (storage->device() != t.device)
    throw InvalidInput(rf::str("set_grad_view: gradient on ", device_name(storage->device()),
                           " for a tensor on ", device_name(t.device)));
  t.grad = std::move(storage);
  t.grad_offset = offset_floats;
}

void Tensor::set_grad_view(float* data, int64_t numel) {
  if (numel != this->numel())
    throw InvalidInput(rf::str("set_grad_view: ", numel, " floats given for a tensor of ", this->numel()));
  set_grad_view(Storage::wrap(data, sizeof(float) * static_cast<size_t>(numel), device()), 0);
}

void Tensor::register_hook(GradHook hook) {
  if (!is_leaf() || !requires_grad())
    throw InvalidInput("register_hook: only leaves that require grad (parameters) take hooks");
  impl().hooks.push_back(std::move(hook));
}

void Tensor::backward() const { run_backward(*this); }

Tensor Tensor::detach() const {
  auto d = std::make_shared<TensorImpl>();
  d->shape = impl().shape;
  d->device = impl().device;
  d->storage = impl().storage;
  d->offset = impl().offset;
  return Tensor(std::move(d));
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = "Tensor" + shape().str() + " " + device_name(device());
  if (op()) s += std::string(" op=") + op();
  return s;
}

}  // namespace rf
