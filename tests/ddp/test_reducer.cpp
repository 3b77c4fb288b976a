// Reducer against a fake communicator: an all-reduce over W identical ranks is the buffer
// times W, which makes every expectation exact; the op numbers it gives its buckets
// (OpPlan); and the reducer on the simulated cuda:0. (The real multi-process case is
// reducer_mp_test.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "comm/communicator.h"
#include "base/str.h"
#include "comm/errors.h"
#include "comm/tag.h"
#include "core/autograd.h"
#include "core/device_runtime.h"
#include "core/optim/sgd.h"
#include "core/state_digest.h"
#include "ddp/op_plan.h"
#include "ddp/reducer.h"
#include "kernels/cpu/table.h"
#include "kernels/op_table.h"
#include "test_model.h"
#include "tests/comm/null_communicator.h"
#include "tests/ckpt/device_twin.h"
#include "tests/core/sim_device.h"

using namespace rf;

namespace {

class DoneWork : public comm::Work {
 public:
  explicit DoneWork(std::exception_ptr e = nullptr) : error_(e) {}
  bool test() override {
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  void wait(TimePoint) override { test(); }

 private:
  std::exception_ptr error_;
};

// W identical ranks: sum = W x buffer. Records the order of the ops it was given and
// whether backward was still running (a flag the test sets around backward).
class TimesW : public comm::testing::NullCommunicator {
 public:
  explicit TimesW(int w) : w_(w) {}
  int world_size() const override { return w_; }
  comm::WorkPtr allreduce_start(comm::Buffer b, comm::OpId id, comm::Stream) override {
    ops.push_back(id.op);
    steps.push_back(id.step);
    inside_registration.push_back(b.registered != nullptr && b.registered->contains(b.data, b.bytes()));
    plain.push_back(b.registered == nullptr);
    during_backward.push_back(in_backward);
    if (fail_op >= 0 && static_cast<int>(id.op) == fail_op) {
      comm::CommErrorInfo info;
      info.collective = "all-reduce";
      info.cause = "injected";
      return std::make_shared<DoneWork>(std::make_exception_ptr(comm::PeerFailed(info)));
    }
    float* f = static_cast<float*>(b.data);
    for (size_t i = 0; i < b.count; ++i) f[i] *= static_cast<float>(w_);
    return std::make_shared<DoneWork>();
  }

  std::vector<uint32_t> ops;
  std::vector<uint64_t> steps;
  std::vector<bool> during_backward;
  std::vector<bool> inside_registration, plain;  // of each all-reduce's Buffer
  bool in_backward = false;
  int fail_op = -1;

 private:
  int w_;
};

struct Batch {
  Tensor x;
  std::vector<int32_t> y;
};
Batch batch(int64_t n) {
  const data::Dataset ds = ddp::testing::make_test_data(n, 11);
  Batch b{Tensor::from({n, 1, 8, 8}, ds.images), ds.labels};
  return b;
}

}  // namespace

TEST_CASE("gradients are views into the buckets, buckets start in order during backward") {
  auto model = ddp::testing::make_test_mlp(3, 32);
  // 64*32+32 | 32*32+32 | 32*10+10 floats: a 4 KiB cap gives several buckets.
  ddp::Reducer red(model->named_parameters(), {.bucket_cap_bytes = 4096, .overlap = true});
  REQUIRE(red.num_buckets() >= 3);
  TimesW comm(3);
  Batch b = batch(5);
  red.begin_step(comm, 7, {.samples = 5});
  Tensor loss = ddp::testing::sum_loss((*model)(b.x), b.y);
  red.set_local_loss(loss);
  comm.in_backward = true;
  loss.backward();
  comm.in_backward = false;
  const ddp::ControlBlock sum = red.finish();
  CHECK(sum.samples == 15);
  CHECK(red.global_loss() == doctest::Approx(loss.item() / 5.0));
  REQUIRE(comm.ops.size() == static_cast<size_t>(red.num_buckets()));
  for (size_t i = 0; i < comm.ops.size(); ++i) {
    CHECK(comm.ops[i] == i);
    CHECK(comm.steps[i] == 7);
    // every bucket but the last overlapped backward (the last runs in finish())
    CHECK(comm.during_backward[i] == (i + 1 < comm.ops.size()));
  }
  CHECK(red.started_during_backward() == red.num_buckets() - 1);

  // The result equals the single-process mean-loss gradient (W identical ranks of 5
  // samples each = the mean over 15 samples that are 3 copies of those 5).
  auto ref = ddp::testing::make_test_mlp(3, 32);
  cross_entropy((*ref)(b.x), b.y, Reduction::Mean).backward();
  auto mine = model->named_parameters(), theirs = ref->named_parameters();
  for (size_t k = 0; k < mine.size(); ++k) {
    auto g = mine[k].second.grad().values(), r = theirs[k].second.grad().values();
    for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(r[i]).epsilon(1e-5));
  }
}

TEST_CASE("shared buckets are registered memory, named by every all-reduce; private buckets name none") {
  for (const bool shared : {true, false}) {
    CAPTURE(shared);
    auto model = ddp::testing::make_test_mlp(3, 32);
    ddp::Reducer red(model->named_parameters(), {.bucket_cap_bytes = 4096, .shared_buckets = shared});
    REQUIRE(red.num_buckets() >= 3);
    TimesW comm(2);
    Batch b = batch(3);
    red.begin_step(comm, 1, {.samples = 3});
    ddp::testing::sum_loss((*model)(b.x), b.y).backward();
    red.finish();
    REQUIRE(comm.ops.size() == static_cast<size_t>(red.num_buckets()));
    for (size_t i = 0; i < comm.ops.size(); ++i) {
      CHECK(comm.inside_registration[i] == shared);
      CHECK(comm.plain[i] == !shared);
    }
  }
}

TEST_CASE("overlap off: every bucket starts after backward; an empty local batch still joins") {
  auto model = ddp::testing::make_test_mlp(3, 32);
  ddp::Reducer red(model->named_parameters(), {.bucket_cap_bytes = 4096, .overlap = false});
  TimesW comm(2);
  Batch b = batch(4);
  red.begin_step(comm, 0, {.samples = 4});
  Tensor loss = ddp::testing::sum_loss((*model)(b.x), b.y);
  comm.in_backward = true;
  loss.backward();
  comm.in_backward = false;
  red.finish();
  CHECK(red.started_during_backward() == 0);
  for (bool d : comm.during_backward) CHECK_FALSE(d);

  // A rank with no samples (W > batch) runs no backward but still starts every bucket, in
  // the same order, contributing zeros. (Here every fake rank is empty, so the global
  // count is 0, which must be an error rather than a division by zero.)
  TimesW comm2(2);
  red.begin_step(comm2, 1, {.samples = 0});
  CHECK_THROWS_WITH(red.finish(), doctest::Contains("no samples"));
  CHECK(comm2.ops.size() == static_cast<size_t>(red.num_buckets()));
  for (auto& p : model->parameters()) {
    const Tensor grad = p.grad();  // a handle: the range below must not outlive it
    for (float g : grad.values()) CHECK(g == 0.0f);
  }
}

TEST_CASE("set_overlap takes effect at the next step; the A/B schedule is a function of the step") {
  auto model = ddp::testing::make_test_mlp(3, 32);
  ddp::Reducer red(model->named_parameters(), {.bucket_cap_bytes = 4096, .overlap = true});
  REQUIRE(red.num_buckets() >= 3);
  Batch b = batch(4);
  // One step with the fake communicator; returns how many buckets started during backward.
  auto step = [&](uint64_t s, bool switch_mid_step, std::vector<float>* grads) {
    TimesW comm(2);
    red.begin_step(comm, s, {.samples = 4});
    if (switch_mid_step) red.set_overlap(!red.overlap());  // too late for this step
    Tensor loss = ddp::testing::sum_loss((*model)(b.x), b.y);
    comm.in_backward = true;
    loss.backward();
    comm.in_backward = false;
    red.finish();
    grads->clear();
    for (auto& p : model->parameters()) grads->insert(grads->end(), p.grad().values().begin(), p.grad().values().end());
    int during = 0;
    for (bool d : comm.during_backward) during += d ? 1 : 0;
    CHECK(comm.ops.size() == static_cast<size_t>(red.num_buckets()));
    return during;
  };
  std::vector<float> g_on, g_off, g_switched;
  CHECK(step(0, true, &g_on) == red.num_buckets() - 1);  // began with overlap: keeps it
  CHECK(red.timeline().overlap);
  CHECK_FALSE(red.overlap());                             // ...and the next step has it off
  CHECK(step(1, false, &g_off) == 0);
  CHECK_FALSE(red.timeline().overlap);
  CHECK(red.started_during_backward() == 0);
  CHECK(g_on == g_off);  // same parameters, same batch: the same sums either way
  red.set_overlap(true);
  CHECK(step(2, false, &g_switched) == red.num_buckets() - 1);
  CHECK(red.timeline().overlap);

  // overlap_ab_on(s, k): on for k steps, off for k, ... from step 0.
  const bool want3[] = {true, true, true, false, false, false, true, true, true, false};
  for (int64_t s = 0; s < 10; ++s) CHECK(ddp::overlap_ab_on(s, 3) == want3[s]);
  for (int64_t s = 0; s < 6; ++s) CHECK(ddp::overlap_ab_on(s, 1) == (s % 2 == 0));
}

TEST_CASE("a failed bucket fails the step; nothing is divided; the next step starts clean") {
  auto model = ddp::testing::make_test_mlp(3, 32);
  ddp::Reducer red(model->named_parameters(), {.bucket_cap_bytes = 4096, .overlap = true});
  TimesW comm(2);
  comm.fail_op = 1;
  Batch b = batch(4);
  red.begin_step(comm, 3, {.samples = 4});
  ddp::testing::sum_loss((*model)(b.x), b.y).backward();
  CHECK_THROWS_AS(red.finish(), comm::PeerFailed);
  comm.fail_op = -1;
  red.begin_step(comm, 3, {.samples = 4});  // redo the step
  ddp::testing::sum_loss((*model)(b.x), b.y).backward();
  CHECK(red.finish().samples == 8);
}

TEST_CASE("a reducer destroyed before its parameters leaves harmless hooks") {
  auto model = ddp::testing::make_test_mlp(3, 8);
  { ddp::Reducer red(model->named_parameters()); }
  Batch b = batch(2);
  ddp::testing::sum_loss((*model)(b.x), b.y).backward();  // hooks fire into nothing
  CHECK(model->parameters()[0].grad().defined());
}

// The op field of the tag (comm::StepTag) numbers every collective of a step: the buckets'
// all-reduces and the trainer's own (ddp/op_plan.h). A layout with more buckets than the
// field has room for beside the trainer's ops is refused when the reducer is built; one
// that fits gives its buckets ops that no trainer collective uses.
namespace {
// n scalar parameters with a 4-byte cap: n buckets of one float each.
std::vector<NamedTensor> scalars(int n) {
  std::vector<NamedTensor> ps;
  for (int i = 0; i < n; ++i) {
    Tensor t = Tensor::zeros({1});
    t.set_requires_grad(true);
    ps.emplace_back(str("p", i), t);
  }
  return ps;
}
constexpr ddp::ReducerOptions kOneFloatBuckets{.bucket_cap_bytes = 4, .last_bucket_cap_bytes = 0};
}  // namespace

TEST_CASE("a layout with more buckets than the tag's op field numbers is refused, naming both counts") {
  // 253: the first count whose last bucket would take the transfer's size op; 300: beyond
  // the field itself.
  for (int n : {ddp::OpPlan::kMaxBuckets + 1, 300}) {
    CAPTURE(n);
    const auto ps = scalars(n);
    const std::string counts = str(n, " buckets (bucket cap 4 bytes), but at most 252 fit the tag's op field");
    const std::string advice = str("raise the bucket cap (ReducerOptions::bucket_cap_bytes): ", 4 * n,
                                   " bytes of gradients need at least 8 bytes per bucket");
    CHECK_THROWS_WITH_AS(ddp::Reducer(ps, kOneFloatBuckets), doctest::Contains(counts.c_str()), InvalidInput);
    CHECK_THROWS_WITH_AS(ddp::Reducer(ps, kOneFloatBuckets), doctest::Contains(advice.c_str()), InvalidInput);
  }
}

TEST_CASE("the most buckets that fit: ops 0 .. 251, none of them a trainer's op") {
  const auto ps = scalars(ddp::OpPlan::kMaxBuckets);
  ddp::Reducer red(ps, kOneFloatBuckets);
  REQUIRE(red.num_buckets() == 252);
  TimesW comm(2);
  red.begin_step(comm, 9, {.samples = 1});
  red.finish();
  REQUIRE(comm.ops.size() == 252);
  for (uint32_t b = 0; b < 252; ++b) {
    CAPTURE(b);
    CHECK(comm.ops[b] == b);
    CHECK(comm.steps[b] == 9);
    for (uint32_t trainer : {ddp::OpPlan::transfer_size(9).op, ddp::OpPlan::transfer_image(9).op,
                             ddp::OpPlan::verify(9).op, comm::StepTag::kInternalOp})
      CHECK(comm.ops[b] != trainer);
  }
  CHECK_THROWS_AS(red.ops().bucket(9, 252), EnforceError);
}

// The reducer on a device: the simulated cuda:0 (tests/core/sim_device.h: host memory and
// the CPU's table behind the device's runtime) runs the paths a GPU takes. DivideSpy stands
// in front of it and counts the table's divide_by, so a division done on the host instead
// (or as well: then the bits differ) fails the test.
namespace {
class DivideSpy final : public DeviceRuntime {
 public:
  explicit DivideSpy(DeviceRuntime& inner) : inner_(inner), table_(inner.ops()) {
    table_.divide_by = [](const kernels::Exec& ex, int64_t n, const float* divisor, float* x) {
      ++divides;
      kernels::cpu_table().divide_by(ex, n, divisor, x);
    };
  }
  Device device() const override { return inner_.device(); }
  const kernels::OpTable& ops() const override { return table_; }
  DeviceAllocator& allocator() override { return inner_.allocator(); }
  kernels::Stream stream() const override { return inner_.stream(); }
  void write(void* dst, const void* src, size_t bytes) override { inner_.write(dst, src, bytes); }
  void read(void* dst, const void* src, size_t bytes) override { inner_.read(dst, src, bytes); }
  void read_async(void* dst, const void* src, size_t bytes) override { inner_.read_async(dst, src, bytes); }
  void record(Fence& f) override { inner_.record(f); }
  void wait(Fence& f) override { inner_.wait(f); }
  void synchronize() override { inner_.synchronize(); }
  void* host_staging(size_t bytes) override { return inner_.host_staging(bytes); }
  void free_host_staging(void* p, size_t bytes) override { inner_.free_host_staging(p, bytes); }
  SyncCounts sync_counts() const override { return inner_.sync_counts(); }

  static inline int divides = 0;

 private:
  DeviceRuntime& inner_;
  kernels::OpTable table_;
};

std::vector<float> grads_on_host(const nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) {
    const Tensor g = p.grad().to(Device::CPU);
    out.insert(out.end(), g.values().begin(), g.values().end());
  }
  return out;
}
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}
}  // namespace

TEST_CASE("on a device: the CPU's bits; a step waits once (one fence), never synchronizes or reads; divides there") {
  rf::testing::ScopedSimDevice sim;
  DivideSpy spy(sim.rt);
  RuntimeOverride installed(spy);
  auto cpu = ddp::testing::make_test_mlp(3, 32);
  rf::testing::DeviceTwin dev(*ddp::testing::make_test_mlp(3, 32), Device::CUDA);
  const ddp::ReducerOptions opt{.bucket_cap_bytes = 4096, .overlap = true};
  ddp::Reducer red_cpu(cpu->named_parameters(), opt), red_dev(dev.named_parameters(), opt);
  REQUIRE(red_dev.num_buckets() >= 3);
  optim::SGD sgd_cpu(cpu->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  optim::SGD sgd_dev(dev.named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  const Batch b = batch(5);
  const Tensor x_dev = b.x.to(Device::CUDA);
  for (uint64_t s = 0; s < 3; ++s) {
    CAPTURE(s);
    TimesW comm_cpu(3), comm_dev(3);
    red_cpu.begin_step(comm_cpu, s, {.samples = 5});
    Tensor loss = ddp::testing::sum_loss((*cpu)(b.x), b.y);
    red_cpu.set_local_loss(loss);
    loss.backward();
    red_cpu.finish();

    // The whole device step, update included: one fence wait (the control tail) and nothing
    // else that blocks.
    const SyncCounts before = sim.rt.sync_counts();
    const int divides_before = DivideSpy::divides;
    red_dev.begin_step(comm_dev, s, {.samples = 5});
    Tensor loss_dev = ddp::testing::sum_loss(dev(x_dev), b.y);
    red_dev.set_local_loss(loss_dev);
    loss_dev.backward();
    const ddp::ControlBlock sum = red_dev.finish();
    const std::vector<float> reduced = grads_on_host(dev);  // (outside the count: reads)
    const SyncCounts mid = sim.rt.sync_counts();
    {
      NoGradGuard ng;
      sgd_dev.step();
    }
    const SyncCounts after = sim.rt.sync_counts();
    CHECK(mid.synchronize == before.synchronize);
    CHECK(mid.fence_waits == before.fence_waits + 1);
    CHECK(mid.reads == before.reads + static_cast<int64_t>(dev.parameters().size()));  // grads_on_host's
    CHECK(after.synchronize == mid.synchronize);
    CHECK(after.reads == mid.reads);
    CHECK(after.fence_waits == mid.fence_waits);
    CHECK(DivideSpy::divides - divides_before == red_dev.num_buckets());

    CHECK(sum.samples == 15);
    CHECK(red_dev.global_loss() == red_cpu.global_loss());  // the same double, exactly
    CHECK(bitwise_equal(reduced, grads_on_host(*cpu)));
    {
      NoGradGuard ng;
      sgd_cpu.step();
    }
  }
  CHECK(state_digest(dev, sgd_dev) == state_digest(*cpu, sgd_cpu));

  // No samples anywhere: the error, before any division (the gradients stay the zero sums).
  TimesW empty(2);
  const int divides_before = DivideSpy::divides;
  red_dev.begin_step(empty, 9, {.samples = 0});
  CHECK_THROWS_WITH(red_dev.finish(), doctest::Contains("no samples"));
  CHECK(DivideSpy::divides == divides_before);
  for (float g : grads_on_host(dev)) CHECK(g == 0.0f);
}

TEST_CASE("the parameters share one device; the loss is one value on it") {
  rf::testing::ScopedSimDevice sim;
  Tensor a = Tensor::zeros({2}), b = Tensor::zeros({3}, Device::CUDA);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  CHECK_THROWS_WITH_AS(ddp::Reducer({{"a", a}, {"b", b}}), doctest::Contains("'a' on cpu, 'b' on cuda:0"),
                       InvalidInput);
  ddp::Reducer red({{"b", b}});
  TimesW one(1);
  red.begin_step(one, 0, {.samples = 2});
  CHECK_THROWS_WITH_AS(red.set_local_loss(Tensor::zeros({1})), doctest::Contains("loss is on cpu"), InvalidInput);
  CHECK_THROWS_WITH_AS(red.set_local_loss(Tensor::zeros({2}, Device::CUDA)), doctest::Contains("one value"),
                       InvalidInput);
  red.set_local_loss(Tensor::full({1}, 6.0f, Device::CUDA));
  CHECK(red.finish().samples == 2);
  CHECK(red.global_loss() == 3.0);
}
