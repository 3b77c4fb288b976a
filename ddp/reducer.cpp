#include "ddp/reducer.h"

#include <algorithm>
#include <cstring>

#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"
#include "kernels/op_table.h"

namespace rf::ddp {
namespace {
constexpr int kTail = ControlBlock::kFloats + 1;  // control block, then the loss sum

std::vector<int64_t> parameter_numels(const std::vector<NamedTensor>& params) {
  std::vector<int64_t> numels;
  numels.reserve(params.size());
  for (const auto& [name, p] : params) {
    if (!p.requires_grad() || !p.is_leaf())
      throw InvalidInput(str("ddp reducer: '", name, "' is not a parameter (a leaf that requires grad)"));
    numels.push_back(p.numel());
  }
  return numels;
}

// The device every parameter lives on (the CPU for none).
Device parameters_device(const std::vector<NamedTensor>& params) {
  if (params.empty()) return Device::CPU;
  const auto& [first_name, first] = params.front();
  for (const auto& [name, p] : params)
    if (!(p.device() == first.device()))
      throw InvalidInput(str("ddp reducer: parameters on two devices: '", first_name, "' on ",
                             device_name(first.device()), ", '", name, "' on ", device_name(p.device()),
                             " (all parameters must be on one device)"));
  return first.device();
}
}  // namespace

Reducer::Reducer(const std::vector<NamedTensor>& params, ReducerOptions options)
    : opt_(options),
      device_(parameters_device(params)),
      rt_(&runtime(device_, "ddp reducer")),
      layout_(make_bucket_layout(parameter_numels(params), opt_.bucket_cap_bytes, opt_.last_bucket_cap_bytes)),
      ops_(layout_, opt_.bucket_cap_bytes),
      self_(std::make_shared<Reducer*>(this)) {
  // Allocated (and so faulted in) once; every step reuses them.
  for (int b = 0; b < layout_.num_buckets(); ++b) {
    const bool last = b + 1 == layout_.num_buckets();
    const size_t n = static_cast<size_t>(layout_.bucket_floats[b] + (last ? kTail : 0));
    if (!(device_ == Device::CPU)) {
      buffers_.push_back(Storage::allocate(sizeof(float) * n, device_));
      rt_->ops().fill(rt_->exec(), static_cast<int64_t>(n), 0.0f, buf(b));
      registered_.push_back(nullptr);  // device memory: no registration yet
    } else if (opt_.shared_buckets) {
      std::shared_ptr<comm::RegisteredMemory> mem = comm::allocate_registered(sizeof(float) * n);  // zero-filled
      buffers_.push_back(Storage::wrap(mem->data(), sizeof(float) * n, Device::CPU, mem));
      registered_.push_back(mem.get());
    } else {
      buffers_.push_back(Storage::allocate(sizeof(float) * n));
      std::memset(buf(b), 0, sizeof(float) * n);
      registered_.push_back(nullptr);
    }
    buffer_floats_.push_back(n);
  }
  tail_host_ = static_cast<float*>(rt_->host_staging(sizeof(float) * kTail));
  pending_.assign(layout_.num_buckets(), 0);
  work_.resize(layout_.num_buckets());
  bucket_start_.resize(layout_.num_buckets());
  bucket_done_.resize(layout_.num_buckets());
  for (size_t k = 0; k < params.size(); ++k) {
    const ParamSlot& slot = layout_.params[k];
    Tensor p = params[k].second;
    p.set_grad_view(buffers_[slot.bucket], slot.offset);
    std::weak_ptr<Reducer*> cell = self_;
    p.register_hook([cell, k](const Tensor&) {
      if (auto c = cell.lock(); c && *c) (*c)->on_grad_ready(static_cast<int>(k));
    });
  }
}

Reducer::~Reducer() {
  *self_ = nullptr;
  rt_->free_host_staging(tail_host_, sizeof(float) * kTail);
}

float* Reducer::tail() const { return buf(layout_.num_buckets() - 1) + layout_.bucket_floats.back(); }

void Reducer::begin_step(comm::Communicator& comm, uint64_t step, const ControlBlock& local) {
  RF_ENFORCE(comm_ == nullptr, "begin_step while step ", step_, " is still open");
  // fill(0.0f) writes the bits memset(0) writes; on another device it only enqueues.
  zero_gradients();
  for (int b = 0; b < layout_.num_buckets(); ++b) {
    pending_[b] = static_cast<int>(layout_.bucket_params[b].size());
    work_[b].reset();
  }
  float block[kTail];
  local.encode(block);
  block[ControlBlock::kFloats] = 0.0f;
  rt_->write(tail(), block, sizeof block);  // ordered after the fills, before forward
  comm_ = &comm;
  step_ = step;
  next_start_ = 0;
  timeline_ = {};
  timeline_.overlap = opt_.overlap;  // the step keeps this setting whatever set_overlap does
  timeline_.begin = Clock::now();
  timeline_.buckets = layout_.num_buckets();
}

void Reducer::zero_gradients() {
  const kernels::Exec ex = rt_->exec();
  for (int b = 0; b < layout_.num_buckets(); ++b) rt_->ops().fill(ex, layout_.bucket_floats[b], 0.0f, buf(b));
}

void Reducer::set_local_loss(const Tensor& loss_sum) {
  if (loss_sum.numel() != 1)
    throw InvalidInput(str("ddp reducer: the local loss must be one value, got ", loss_sum.numel(), " elements"));
  if (!(loss_sum.device() == device_))
    throw InvalidInput(str("ddp reducer: the local loss is on ", device_name(loss_sum.device()),
                           ", the gradients on ", device_name(device_)));
  rt_->ops().copy(rt_->exec(), 1, loss_sum.data(), tail() + ControlBlock::kFloats);
}

void Reducer::on_grad_ready(int param) {
  if (!comm_) return;  // a backward outside a step (e.g. a user's own): nothing to reduce
  const int b = layout_.params[param].bucket;
  RF_ENFORCE(pending_[b] > 0, "gradient of parameter ", param, " final twice in step ", step_);
  if (--pending_[b] == 0 && timeline_.overlap) {
    const int before = next_start_;
    start_ready_buckets();
    timeline_.started_early += next_start_ - before;
  }
}

void Reducer::start_ready_buckets() {
  // The last bucket is never started from a hook: its gradients are the last of backward,
  // so nothing is left to overlap, and finish() runs it with the blocking call, in which
  // the training thread drives the transport itself (no hand-off to the progress thread).
  const int last = layout_.num_buckets() - 1;
  while (next_start_ < last && pending_[next_start_] == 0) start_bucket(next_start_++);
}

void Reducer::start_bucket(int b) {
  bucket_start_[b] = Clock::now();
  if (b == 0) timeline_.first_start = bucket_start_[b];
  work_[b] = comm_->allreduce_start(whole(b), ops_.bucket(step_, b), stream());
}

comm::Stream Reducer::stream() const {
  // A device bucket's gradients are enqueued on the runtime's stream: the collective is
  // ordered after them, and the division after it (comm/communicator.h).
  return device_.is_cpu() ? nullptr : rt_->stream();
}

comm::Buffer Reducer::whole(int b) const {
  comm::Buffer w{buf(b), buffer_floats_[b], comm::DType::f32};
  w.registered = registered_[b];
  if (!device_.is_cpu()) {  // the backend learns where the bucket lives from the buffer
    w.device = comm::Device::cuda;
    w.device_index = device_.index;
  }
  return w;
}

ControlBlock Reducer::finish() {
  RF_ENFORCE(comm_ != nullptr, "finish without begin_step");
  timeline_.finish_enter = Clock::now();
  try {
    // Which overlapped buckets the communicator finished while backward ran (test() pumps
    // at most once, and only if nobody drives: it cannot hide a long wait).
    for (int b = 0; b < next_start_; ++b) timeline_.done_at_finish += work_[b]->test() ? 1 : 0;
    // Buckets whose hooks did not all fire (an empty local batch, an unused parameter)
    // still join the collective: all ranks start the same ones in the same order.
    for (int b = 0; b < next_start_; ++b) {
      work_[b]->wait();
      bucket_done_[b] = Clock::now();
    }
    for (; next_start_ < layout_.num_buckets(); ++next_start_) {
      bucket_start_[next_start_] = Clock::now();
      if (next_start_ == 0) timeline_.first_start = bucket_start_[next_start_];
      if (device_.is_cpu()) {
        comm_->allreduce(whole(next_start_), ops_.bucket(step_, next_start_));
      } else {
        comm_->allreduce_start(whole(next_start_), ops_.bucket(step_, next_start_), stream())->wait();
      }
      bucket_done_[next_start_] = Clock::now();
    }
  } catch (...) {
    abandon();
    throw;
  }
  comm_ = nullptr;
  // The summed tail reaches the host through one small copy and one fence: the step's only
  // wait for the device (no synchronize(), no blocking read).
  rt_->read_async(tail_host_, tail(), sizeof(float) * kTail);
  rt_->record(tail_fence_);
  rt_->wait(tail_fence_);
  const ControlBlock sum = ControlBlock::decode(tail_host_);
  if (sum.samples <= 0) throw Error(str("ddp reducer: step ", step_, " has no samples on any rank"));
  global_loss_ = static_cast<double>(tail_host_[ControlBlock::kFloats]) / static_cast<double>(sum.samples);
  // g[i] /= the summed sample-count slot, read on the device. That float is exactly
  // static_cast<float>(sum.samples): decode accepted it as an integer below 2^40, which an
  // int64 holds exactly and which converts back to the same float. So the quotient has the
  // bits of dividing by the count on the host, for every count decode accepts.
  const float* divisor = tail();
  const kernels::Exec ex = rt_->exec();
  for (int b = 0; b < layout_.num_buckets(); ++b) rt_->ops().divide_by(ex, layout_.bucket_floats[b], divisor, buf(b));
  timeline_.finish_end = Clock::now();
  return sum;
}

void Reducer::abandon() {
  for (auto& w : work_) w.reset();
  comm_ = nullptr;
}

}  // namespace rf::ddp
