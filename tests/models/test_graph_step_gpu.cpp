// --cuda-graph's step on a GPU (label gpu; skipped with exit 77 without one): GraphStep
// (models/graph_step.h) with the real CUDA graph (core/cuda_graph.h) against the eager step
// on the same GPU, bit for bit, across the short batch, a lasting change of batch shape
// (re-captured) and a replaced state (dropped, re-captured); replays allocate nothing and
// never synchronise the device.
#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/cuda_graph.h"
#include "core/data/dataset.h"
#include "core/device_runtime.h"
#include "core/ops.h"
#include "core/state_digest.h"
#include "models/graph_step.h"
#include "models/train_setup.h"

using namespace rf;
using namespace rf::models;

namespace {

const Device kGpu = Device::cuda(0);

struct Run {
  std::string digest;
  std::vector<float> losses;
  GraphStep::Counts counts;
  size_t fresh_after_warmup = 0, fresh_at_end = 0;
  int64_t synchronize_in_replays = 0;
};

// One step per entry of `rows` (the batch's row count); a negative entry: state_replaced()
// first, then a step of -rows.
Run train_steps(ModelKind kind, StepGraphFactory factory, const std::vector<int64_t>& rows) {
  TrainOptions o;
  o.model = kind;
  o.synthetic = 512;
  o.lr = 0.02f;
  o.device = kGpu;
  const data::Dataset ds = load_train_set(o);
  auto model = build_model(o);
  optim::SGD sgd(model->named_parameters(), sgd_options(o));
  GraphStep stepper(*model, sgd, kGpu, kReferenceClasses, factory);
  DeviceRuntime& rt = runtime(kGpu);
  Run r;
  for (size_t s = 0; s < rows.size(); ++s) {
    if (rows[s] < 0) stepper.state_replaced();
    const int64_t b = rows[s] < 0 ? -rows[s] : rows[s];
    std::vector<int64_t> idx(static_cast<size_t>(b));
    std::iota(idx.begin(), idx.end(), static_cast<int64_t>(s * 32) % 400);
    Tensor x = Tensor::empty({b, ds.c, ds.h, ds.w});
    std::vector<int32_t> labels(static_cast<size_t>(b));
    data::gather_batch(ds, idx, x.data(), labels.data());
    const int64_t replays = stepper.counts().replays;
    const int64_t syncs = rt.sync_counts().synchronize;
    Tensor loss = stepper.run(x, labels);
    if (stepper.counts().replays > replays) r.synchronize_in_replays += rt.sync_counts().synchronize - syncs;
    r.losses.push_back(loss.item());
    if (s == 5) r.fresh_after_warmup = rt.allocator().stats().fresh_blocks;
  }
  r.fresh_at_end = rt.allocator().stats().fresh_blocks;
  r.digest = state_digest(*model, sgd);
  r.counts = stepper.counts();
  return r;
}

void check_same(const Run& graph, const Run& eager) {
  CHECK(graph.digest == eager.digest);
  CHECK(graph.losses == eager.losses);
  CHECK(graph.synchronize_in_replays == 0);
}

}  // namespace

TEST_CASE("graph step on a GPU: replays give the eager step's losses and state, bitwise, across short batches") {
  // 32 rows, a short batch of 24 every 5th step (eager; the graph is kept)
  std::vector<int64_t> rows;
  for (int s = 0; s < 16; ++s) rows.push_back(s % 5 == 4 ? 24 : 32);
  for (ModelKind kind : {ModelKind::MLP, ModelKind::CNN}) {
    CAPTURE(model_name(kind));
    const Run eager = train_steps(kind, nullptr, rows);
    const Run graph = train_steps(kind, &make_cuda_graph, rows);
    check_same(graph, eager);
    CHECK(graph.counts.captures == 1);
    CHECK(graph.counts.eager == 5);  // steps 0, 1 (cold, then the warm key's first), 4, 9, 14
    CHECK(graph.counts.replays == 10);
    // after step 5 (the first short batch and a replay after it) every step replays the graph or
    // repeats the short batch's eager step: nothing new from cudaMalloc
    CHECK(graph.fresh_at_end == graph.fresh_after_warmup);
  }
}

TEST_CASE("graph step on a GPU: a lasting batch shape and a replaced state are re-captured, with the eager bits") {
  // 32 rows for 6 steps, 24 rows for 6 (re-captured), then the state replaced (dropped,
  // captured again once stable)
  const std::vector<int64_t> rows{32, 32, 32, 32, 32, 32, 24, 24, 24, 24, 24, 24, -24, 24, 24, 24};
  const Run eager = train_steps(ModelKind::MLP, nullptr, rows);
  const Run graph = train_steps(ModelKind::MLP, &make_cuda_graph, rows);
  check_same(graph, eager);
  CHECK(graph.counts.captures == 3);
  CHECK(graph.counts.eager == 4);  // steps 0, 1, 6 (the new shape's first), 12 (after the replace)
  CHECK(graph.counts.replays == 9);
}

TEST_CASE("graph step on a GPU: a CudaGraph replays what it captured, holds the device's pool until its reset") {
  DeviceRuntime& rt = runtime(kGpu);
  Tensor a = Tensor::from({4}, std::vector<float>{1, 2, 3, 4}, kGpu);
  Tensor out;
  CudaGraph g(kGpu);
  g.capture([&] { out = add(a, a); });
  CHECK(g.captured());
  const std::vector<float> two_a{2, 4, 6, 8};
  g.replay();
  Tensor back = out.to(Device::CPU);
  CHECK(std::vector<float>(back.values().begin(), back.values().end()) == two_a);
  rt.write(a.data(), std::vector<float>{10, 20, 30, 40}.data(), 4 * sizeof(float));
  g.replay();
  back = out.to(Device::CPU);
  CHECK(std::vector<float>(back.values().begin(), back.values().end()) == std::vector<float>{20, 40, 60, 80});
  // one graph per device: another one's capture is refused until this one is reset
  CudaGraph other(kGpu);
  Tensor out2;
  CHECK_THROWS_WITH_AS(other.capture([&] { out2 = add(a, a); }),
                       "cuda:0: another CUDA graph holds the device's graph pool", Error);
  out = Tensor();
  g.reset();
  CHECK_FALSE(g.captured());
  CHECK_THROWS(g.replay());
  other.capture([&] { out2 = add(a, a); });
  other.replay();
  back = out2.to(Device::CPU);
  CHECK(std::vector<float>(back.values().begin(), back.values().end()) == std::vector<float>{20, 40, 60, 80});
  out2 = Tensor();
}
