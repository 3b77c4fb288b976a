// spirals — a model of your own trained by ringfence's resilient trainer: three interleaved
// spirals in the plane, a small residual network of our own, cross-entropy, SGD. Alone it
// trains as one process; under `ringfence run -n N` it trains data-parallel and survives a
// rank's death (kill, hang, lost connection) in place. docs/your-model.md explains each part.
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>

#include "core/nn/layers.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "core/random.h"
#include "ddp/trainer.h"

using namespace rf;

// The model: any nn::Module. Parameters are registered (directly or through sub-modules),
// every replica builds them from the same seed, and forward is a pure function of the input.
class SpiralNet : public nn::Module {
 public:
  explicit SpiralNet(Generator& g)
      : in_(std::make_shared<nn::Linear>(2, 64, g)),
        hidden_(std::make_shared<nn::Linear>(64, 64, g)),
        out_(std::make_shared<nn::Linear>(64, 3, g)) {
    register_module("in", in_);
    register_module("hidden", hidden_);
    register_module("out", out_);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = relu(in_->forward(flatten(x)));   // [N, 1, 1, 2] -> [N, 64]
    return out_->forward(add(h, relu(hidden_->forward(h))));  // a residual block
  }

 private:
  std::shared_ptr<nn::Linear> in_, hidden_, out_;
};

// The data: a Dataset indexed by sample (the trainer picks each step's samples by index, so
// every rank and every replacement sees the same batches). Made here from a fixed seed.
data::Dataset make_spirals(int64_t n, uint64_t seed) {
  data::Dataset ds;
  ds.n = n, ds.c = 1, ds.h = 1, ds.w = 2, ds.num_classes = 3;
  Generator g(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(i % 3);
    const float r = g.uniform(0.05f, 1.0f), turn = 2.0944f * static_cast<float>(label);
    const float angle = 4.0f * r + turn + g.uniform(-0.15f, 0.15f);
    ds.images.push_back(r * std::cos(angle));
    ds.images.push_back(r * std::sin(angle));
    ds.labels.push_back(label);
  }
  return ds;
}

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  const data::Dataset train = make_spirals(6000, 1);
  Generator init(42);  // the same initial weights on every rank
  SpiralNet model(init);
  optim::SgdOptions so;
  so.lr = 0.1f;
  so.momentum = 0.9f;
  optim::SGD sgd(model.named_parameters(), so);

  ddp::TrainerConfig cfg;
  cfg.model_name = "spirals";
  cfg.global_batch = 120;
  cfg.steps = steps;
  cfg.log_interval = 50;
  // Under `ringfence run` the trainer joins the job (and recovers); alone it runs one rank.
  cfg.fault_tolerance = ddp::launched_by_ringfence();
  // The loss must be the SUM over the local samples: the trainer divides by the global count.
  ddp::LossFn loss = [](const Tensor& out, std::span<const int32_t> y) {
    return cross_entropy(out, y, Reduction::Sum);
  };
  ddp::Trainer trainer(model, loss, train, sgd, cfg);
  const ddp::TrainerResult r = trainer.run();
  if (r.standby) return 0;  // a spare the job never needed
  std::printf("spirals: step %lld, world %d, recoveries %lld, final loss %.4f, state %s\n",
              static_cast<long long>(r.step), r.world, static_cast<long long>(r.recoveries), r.final_loss,
              r.digest.c_str());
  return 0;
}
