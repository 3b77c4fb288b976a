// GraphStep (models/graph_step.h) on the CPU with a stand-in for the CUDA graph: capture
// keeps the work, replay runs it again. That checks the host's half of --cuda-graph — the
// policy's decisions in a real loop, the inputs copied into the graph's own buffers before
// each replay, the loss read from the graph's output, the optimizer's counters, a failed
// capture falling back to eager steps — against the eager step, bit for bit; and, as the
// trainer's local step (ddp::TrainerConfig::local_step), against the trainer's own step. What
// only a GPU can check (the captured kernels, the private pool) is
// tests/models/gpu_programs_test.py's cuda-graph case.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/data/dataset.h"
#include "core/state_digest.h"
#include "ddp/trainer.h"
#include "models/graph_step.h"
#include "models/train_setup.h"

using namespace rf;
using namespace rf::models;

namespace {

optim::SGD* g_sgd = nullptr;  // the stand-in's replay undoes what only the host did
bool g_fail_capture = false;

// A real capture runs the step's host code once (SGD::step moves the counters) and none of
// its kernels; a replay runs the kernels only. The stand-in: capture moves the counters as
// that host code would and keeps the work; replay runs the work and puts the counters back.
class RerunGraph final : public StepGraph {
 public:
  void capture(const std::function<void()>& work) override {
    g_sgd->count_replayed_step();
    if (g_fail_capture) throw Error("stand-in: capture refused");  // after the counters moved
    work_ = work;
  }
  void replay() override {
    const auto before = g_sgd->named_counters();
    work_();
    for (const auto& [name, count] : before) g_sgd->set_counter(name, count);
  }
  void reset() override { work_ = nullptr; }
  bool captured() const override { return static_cast<bool>(work_); }

 private:
  std::function<void()> work_;
};

std::unique_ptr<StepGraph> make_rerun(Device) { return std::make_unique<RerunGraph>(); }

struct Run {
  std::string digest;
  std::vector<float> losses;
  GraphStep::Counts counts;
};

// `steps` steps of the MLP on synthetic data, batch 32 except every 5th step (24 rows).
Run train_steps(StepGraphFactory factory, int steps) {
  TrainOptions o;
  o.model = ModelKind::MLP;
  o.synthetic = 256;
  o.lr = 0.02f;
  const data::Dataset ds = load_train_set(o);
  auto model = build_model(o);
  optim::SGD sgd(model->named_parameters(), sgd_options(o));
  g_sgd = &sgd;
  GraphStep stepper(*model, sgd, Device::CPU, kReferenceClasses, factory);
  Run r;
  for (int s = 0; s < steps; ++s) {
    const int64_t b = s % 5 == 4 ? 24 : 32;
    std::vector<int64_t> idx(static_cast<size_t>(b));
    std::iota(idx.begin(), idx.end(), (s * 32) % 200);
    Tensor x = Tensor::empty({b, ds.c, ds.h, ds.w});
    std::vector<int32_t> labels(static_cast<size_t>(b));
    data::gather_batch(ds, idx, x.data(), labels.data());
    r.losses.push_back(stepper.run(x, labels).item());
  }
  r.digest = state_digest(*model, sgd);
  r.counts = stepper.counts();
  g_sgd = nullptr;
  return r;
}

}  // namespace

TEST_CASE("graph step: replays give the eager step's losses and final state, bit for bit") {
  const Run eager = train_steps(nullptr, 12);
  CHECK(eager.counts.eager == 12);
  const Run graph = train_steps(&make_rerun, 12);
  CHECK(graph.digest == eager.digest);
  CHECK(graph.losses == eager.losses);
  // steps 0-1 eager (cold optimizer, then the warm key's first step), 2 captured, the
  // short batches (4, 9) eager, the rest replays
  CHECK(graph.counts.captures == 1);
  CHECK(graph.counts.eager == 4);
  CHECK(graph.counts.replays == 7);
}

TEST_CASE("graph step: a capture that fails is logged and the run goes on eagerly, with the same bits") {
  const Run eager = train_steps(nullptr, 8);
  g_fail_capture = true;
  const Run failed = train_steps(&make_rerun, 8);
  g_fail_capture = false;
  CHECK(failed.digest == eager.digest);
  CHECK(failed.losses == eager.losses);
  CHECK(failed.counts.captures == 0);
  CHECK(failed.counts.replays == 0);
  CHECK(failed.counts.eager == 8);
}

TEST_CASE("graph step: a label outside the classes is refused before a replay copies it") {
  TrainOptions o;
  o.synthetic = 64;
  const data::Dataset ds = load_train_set(o);
  auto model = build_model(o);
  optim::SGD sgd(model->named_parameters(), sgd_options(o));
  g_sgd = &sgd;
  GraphStep stepper(*model, sgd, Device::CPU, kReferenceClasses, &make_rerun);
  Tensor x = Tensor::zeros({4, ds.c, ds.h, ds.w});
  std::vector<int32_t> labels{0, 1, 2, 3};
  for (int s = 0; s < 3; ++s) stepper.run(x, labels).item();
  CHECK(stepper.counts().captures == 1);
  labels[2] = 10;
  CHECK_THROWS_WITH_AS(stepper.run(x, labels), "nll_loss: label 10 of row 2 is outside [0, 10)", InvalidInput);
  g_sgd = nullptr;
}

namespace {

// `steps` steps by hand through the trainer (one rank, no fault tolerance), batch 32 of 250
// samples (every 8th batch short: 26 rows), with GraphStep as its local step when `factory`
// is given.
Run trainer_steps(StepGraphFactory factory, bool local_step, int steps) {
  TrainOptions o;
  o.model = ModelKind::MLP;
  o.synthetic = 250;
  o.lr = 0.02f;
  const data::Dataset ds = load_train_set(o);
  auto model = build_model(o);
  optim::SGD sgd(model->named_parameters(), sgd_options(o));
  g_sgd = &sgd;
  GraphStep stepper(*model, sgd, Device::CPU, kReferenceClasses, factory);
  Run r;
  ddp::TrainerConfig cfg;
  cfg.fault_tolerance = false;
  cfg.global_batch = 32;
  cfg.steps = steps;
  cfg.on_step = [&r](int64_t, double loss) { r.losses.push_back(static_cast<float>(loss)); };
  if (local_step) cfg.local_step = [&](const Tensor& x, std::span<const int32_t> y) { return stepper.run(x, y); };
  ddp::Trainer trainer(
      *model, [](const Tensor& out, std::span<const int32_t> y) { return classification_loss(out, y, Reduction::Sum); },
      ds, sgd, cfg);
  r.digest = trainer.run().digest;
  CHECK(r.digest == state_digest(*model, sgd));
  r.counts = stepper.counts();
  g_sgd = nullptr;
  return r;
}

}  // namespace

TEST_CASE("graph step as the trainer's local step: the trainer's own step's losses and final state, bit for bit") {
  const Run own = trainer_steps(nullptr, false, 20);
  const Run eager = trainer_steps(nullptr, true, 20);
  CHECK(eager.counts.eager == 20);
  CHECK(eager.digest == own.digest);
  CHECK(eager.losses == own.losses);
  const Run graph = trainer_steps(&make_rerun, true, 20);
  CHECK(graph.digest == own.digest);
  CHECK(graph.losses == own.losses);
  // steps 0-1 eager, 2 captured, the short batches (7, 15) eager and each followed by a
  // full batch whose key the graph still holds (replayed), the rest replays
  CHECK(graph.counts.captures == 1);
  CHECK(graph.counts.eager == 4);
  CHECK(graph.counts.replays == 15);
}
