#include "ddp/exact_reducer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/enforce.h"
#include "base/str.h"
#include "ddp/fixed_point.h"

namespace rf::ddp {
namespace {
// The last bucket's tail, as Reducer's: the control block's fields, then the loss sum.
constexpr int kLoss = ControlBlock::kFields;
constexpr int kTail = ControlBlock::kFields + 1;
}

ExactReducer::ExactReducer(Reducer& reducer, const std::vector<NamedTensor>& params, int micro_shards)
    : red_(reducer), m_(micro_shards) {
  if (m_ < 1) throw InvalidInput(str("exact mode: --micro-shards must be >= 1, got ", m_));
  if (!red_.device().is_cpu())
    throw InvalidInput(str("exact mode: the parameters are on ", device_name(red_.device()),
                           "; exact mode sums on the CPU only (docs/exact.md)"));
  const BucketLayout& l = red_.layout();
  if (l.num_buckets() >= OpPlan::kMaxBuckets)
    throw InvalidInput(str("exact mode: ", l.num_buckets(), " gradient buckets leave no op for the scales (at most ",
                           OpPlan::kMaxBuckets - 1, "): raise the bucket cap"));
  RF_ENFORCE(params.size() == l.params.size(), params.size(), " parameters for a layout of ", l.params.size());
  std::vector<int64_t> base(l.num_buckets(), 0);
  for (int b = 1; b < l.num_buckets(); ++b) base[b] = base[b - 1] + l.bucket_floats[b - 1];
  flat_floats_ = base.back() + l.bucket_floats.back();
  for (size_t k = 0; k < l.params.size(); ++k) {
    const ParamSlot& p = l.params[k];
    params_.push_back({params[k].first, params[k].second, p.bucket, p.offset, base[p.bucket] + p.offset, p.numel});
  }
  for (int b = 0; b < l.num_buckets(); ++b) {
    const size_t n = static_cast<size_t>(l.bucket_floats[b]) + (b + 1 == l.num_buckets() ? kTail : 0);
    if (red_.shared_buckets()) {
      registered_.push_back(comm::allocate_registered(n * sizeof(int64_t)));  // zero-filled, resident
      ints_.push_back(static_cast<int64_t*>(registered_.back()->data()));
    } else {
      registered_.push_back(nullptr);
      plain_.emplace_back(n, 0);
      ints_.push_back(plain_.back().data());
    }
    int_counts_.push_back(n);
  }
}

ExactReducer::~ExactReducer() = default;

comm::Buffer ExactReducer::int_buffer(int b) const {
  comm::Buffer w{ints_[b], int_counts_[b], comm::DType::i64};
  w.registered = registered_[b].get();
  return w;
}

void ExactReducer::begin_step(comm::Communicator& comm, uint64_t step, const ControlBlock& local, int shards) {
  RF_ENFORCE(comm_ == nullptr, "begin_step while step ", step_, " is still open");
  RF_ENFORCE(shards >= 0 && shards <= m_, shards, " shards of ", m_);
  comm_ = &comm;
  step_ = step;
  shards_ = shards;
  done_ = 0;
  local_ = local;
  while (static_cast<int>(kept_.size()) < shards)  // allocated once, kept for the next steps
    kept_.push_back(Storage::allocate(sizeof(float) * static_cast<size_t>(flat_floats_)));
  losses_.assign(shards, 0.0f);
}

void ExactReducer::point_gradients_at(const std::shared_ptr<Storage>& shard) {
  for (Segment& p : params_) {
    if (shard) p.param.set_grad_view(shard, p.flat);
    else p.param.set_grad_view(red_.bucket_storage(p.bucket), p.offset);
  }
}

void ExactReducer::begin_shard() {
  RF_ENFORCE(comm_ != nullptr && done_ < shards_, "shard ", done_, " of ", shards_, " outside a step");
  std::memset(kept_[done_]->data(), 0, sizeof(float) * static_cast<size_t>(flat_floats_));
  point_gradients_at(kept_[done_]);
}

void ExactReducer::end_shard(const Tensor& loss_sum) {
  RF_ENFORCE(comm_ != nullptr && done_ < shards_, "shard ", done_, " of ", shards_, " outside a step");
  if (loss_sum.numel() != 1)
    throw InvalidInput(str("exact mode: the local loss must be one value, got ", loss_sum.numel(), " elements"));
  losses_[done_] = *loss_sum.data();
  ++done_;
}

void ExactReducer::end_empty_shard() {
  RF_ENFORCE(comm_ != nullptr && done_ < shards_, "shard ", done_, " of ", shards_, " outside a step");
  losses_[done_] = 0.0f;  // begin_shard zeroed its gradients
  ++done_;
}

// Step 1: every tensor's largest |g| over all shards of all ranks (the loss last).
std::vector<float> ExactReducer::agree_scales(int64_t step) {
  const size_t t = params_.size() + 1;
  std::vector<float> mine(t, 0.0f);
  for (int k = 0; k < shards_; ++k) {
    for (size_t i = 0; i < params_.size(); ++i)
      mine[i] = std::max(mine[i], exact::max_abs(kept(k) + params_[i].flat, params_[i].numel));
    mine[t - 1] = std::max(mine[t - 1], exact::max_abs(&losses_[k], 1));
  }
  const int w = comm_->world_size();
  gathered_.assign(t * static_cast<size_t>(w), 0.0f);
  comm_->allgather({mine.data(), t, comm::DType::f32}, {gathered_.data(), gathered_.size(), comm::DType::f32},
                   red_.ops().exact_scales(static_cast<uint64_t>(step)));
  std::vector<float> agreed(t, 0.0f);
  for (int r = 0; r < w; ++r)
    for (size_t i = 0; i < t; ++i) {
      const float v = gathered_[static_cast<size_t>(r) * t + i];
      if (!std::isfinite(v))  // the same first (tensor, rank) on every rank
        throw NonFiniteGradient(str("exact mode: step ", step, ": the ",
                                    i + 1 == t ? std::string("loss") : str("gradient of '", params_[i].name, "'"),
                                    " is NaN or infinite on rank ", r, "; the step is not applied"));
      agreed[i] = std::max(agreed[i], v);
    }
  return agreed;
}

// Step 2, locally: the shards' fixed-point sums, and the control block as integers.
void ExactReducer::sum_integers(const std::vector<int>& shifts) {
  for (size_t b = 0; b < ints_.size(); ++b) std::memset(ints_[b], 0, sizeof(int64_t) * int_counts_[b]);
  // In blocks that stay in L1 while every shard adds to them: the sums are read and written
  // once, each shard's gradients streamed once.
  constexpr int64_t kBlock = 2048;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Segment& p = params_[i];
    for (int64_t at = 0; at < p.numel; at += kBlock) {
      const int64_t n = std::min(kBlock, p.numel - at);
      for (int k = 0; k < shards_; ++k)
        exact::add_fixed(kept(k) + p.flat + at, n, shifts[i], ints_[p.bucket] + p.offset + at);
    }
  }
  int64_t* tail = ints_.back() + (int_counts_.back() - kTail);
  local_.encode(tail);
  for (int k = 0; k < shards_; ++k) exact::add_fixed(&losses_[k], 1, shifts.back(), tail + kLoss);
}

// Step 2, across ranks: bucket by bucket with the buckets' own ops, the last one blocking
// (the training thread drives the transport, as Reducer::finish does).
void ExactReducer::allreduce_integers(uint64_t step) {
  const int n = static_cast<int>(ints_.size());
  std::vector<comm::WorkPtr> work;
  for (int b = 0; b + 1 < n; ++b) work.push_back(comm_->allreduce_start(int_buffer(b), red_.ops().bucket(step, b)));
  for (auto& w : work) w->wait();
  comm_->allreduce(int_buffer(n - 1), red_.ops().bucket(step, n - 1));
}

// Step 3: one rounding per element, the division by the global count included.
ControlBlock ExactReducer::round_into_gradients(const std::vector<int>& shifts) {
  const int64_t* tail = ints_.back() + (int_counts_.back() - kTail);
  const ControlBlock sum = ControlBlock::decode(tail);
  if (sum.samples <= 0) throw Error(str("ddp reducer: step ", step_, " has no samples on any rank"));
  const double count = static_cast<double>(sum.samples);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Segment& p = params_[i];
    exact::round_fixed(ints_[p.bucket] + p.offset, p.numel, shifts[i], count, red_.gradients(p.bucket) + p.offset);
  }
  float loss = 0.0f;
  exact::round_fixed(tail + kLoss, 1, shifts.back(), count, &loss);
  global_loss_ = loss;
  return sum;
}

ControlBlock ExactReducer::finish() {
  RF_ENFORCE(comm_ != nullptr, "finish without begin_step");
  RF_ENFORCE(done_ == shards_, "finish after ", done_, " of ", shards_, " shards");
  point_gradients_at(nullptr);  // the optimizer reads the buckets, which step 3 fills
  ControlBlock sum;
  try {
    const std::vector<float> agreed = agree_scales(static_cast<int64_t>(step_));
    std::vector<int> shifts(agreed.size());
    for (size_t i = 0; i < agreed.size(); ++i) shifts[i] = exact::fixed_shift(agreed[i], m_);
    sum_integers(shifts);
    allreduce_integers(step_);
    sum = round_into_gradients(shifts);
  } catch (...) {
    abandon();
    throw;
  }
  comm_ = nullptr;
  return sum;
}

void ExactReducer::abandon() {
  point_gradients_at(nullptr);
  comm_ = nullptr;
}

}  // namespace rf::ddp
