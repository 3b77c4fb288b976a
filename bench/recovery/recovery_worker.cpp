// recovery_worker — the resilient Trainer on the reference MLP or CNN (models/), or a
// synthetic state of --big-params parameters (--model big: the MLP plus one large
// parameter), for recovery_bench.py. Synthetic Fashion-MNIST-shaped data by default (no
// load time in the measurement), or the real data with --data-dir.
//   recovery_worker --model mlp|cnn|big --audit-dir DIR [--steps N] [--batch B] [--samples N]
//                   [--big-params N (default 100M)]
//                   [--data-dir D] [--threads T] [--no-overlap] [--bucket-mib M]
//                   [--ckpt-dir D --ckpt-every N [--resume]]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "base/error.h"
#include "base/str.h"
#include "core/data/data.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "ddp/trainer.h"
#include "kernels/cpu/gemm.h"
#include "models/reference.h"

using namespace rf;

namespace {
// The reference MLP plus one parameter P [10, K] (10*K ~ big_params floats) that adds
// eps * P * 1 (a per-class offset, one matrix-vector product) to the logits: a state of
// ~100M parameters whose gradient is dense (all of P changes every step, so the all-reduce,
// the optimizer and the transfer all move the full 400 MB), while a step costs only two
// passes over P instead of a 100M-parameter GEMM per sample.
class BigState : public nn::Module {
 public:
  BigState(std::shared_ptr<nn::Module> mlp, int64_t big_params) : mlp_(std::move(mlp)) {
    register_module("mlp", mlp_);
    const int64_t k = std::max<int64_t>(1, big_params / 10);
    Tensor& p = register_parameter("big", Tensor::empty({10, k}));
    float* v = p.data();
    for (int64_t i = 0; i < 10 * k; ++i) v[i] = static_cast<float>((static_cast<uint64_t>(i) * 2654435761u) % 1000) * 1e-3f - 0.5f;
    ones_ = Tensor::full({1, k}, 1.0f);
    eps_ = Tensor::full({10}, 1e-7f);
  }
  Tensor forward(const Tensor& x) override {
    const Tensor offset = mul(reshape(matmul(ones_, parameter("big"), false, true), {10}), eps_);
    return add_bias((*mlp_)(x), offset);
  }

 private:
  std::shared_ptr<nn::Module> mlp_;
  Tensor ones_, eps_;
};
}  // namespace

int main(int argc, char** argv) {
  ddp::TrainerConfig cfg;
  cfg.steps = 200;
  cfg.global_batch = 128;
  std::string model = "mlp", audit_dir, data_dir;
  int64_t samples = 8192;
  int threads = 1;
  int64_t big_params = 100'000'000;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string f = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) throw InvalidInput(str(f, " needs a value"));
        return argv[++i];
      };
      if (f == "--model") model = val();
      else if (f == "--steps") cfg.steps = std::stoll(val());
      else if (f == "--batch") cfg.global_batch = std::stoll(val());
      else if (f == "--samples") samples = std::stoll(val());
      else if (f == "--data-dir") data_dir = val();
      else if (f == "--big-params") big_params = std::stoll(val());
      else if (f == "--threads") threads = std::stoi(val());
      else if (f == "--no-overlap") cfg.reducer.overlap = false;
      else if (f == "--bucket-mib") cfg.reducer.bucket_cap_bytes = std::stoull(val()) << 20;
      else if (f == "--audit-dir") audit_dir = val();
      else if (f == "--ckpt-dir") cfg.ckpt_dir = val();
      else if (f == "--ckpt-every") cfg.ckpt_every = std::stoll(val());
      else if (f == "--resume") cfg.resume = true;
      else throw InvalidInput(str("unknown option ", f));
    }
    if (model != "mlp" && model != "cnn" && model != "big")
      throw InvalidInput(str("--model ", model, ": expected mlp, cnn or big"));
    const char* slot = std::getenv("RINGFENCE_SLOT");
    const char* inc = std::getenv("RINGFENCE_INCARNATION");
    if (!audit_dir.empty()) {
      const std::string tag = str("slot", slot ? slot : "x", "-inc", inc ? inc : "x");
      cfg.audit_log = audit_dir + "/audit-" + tag + ".jsonl";
      cfg.flight_recorder = audit_dir + "/flight-" + tag + ".jsonl";
    }
    kernels::cpu::set_num_threads(threads);
    const auto kind = model == "cnn" ? models::ModelKind::CNN : models::ModelKind::MLP;
    cfg.model_name = model == "big" ? "big-state" : models::model_name(kind);
    std::shared_ptr<nn::Module> net = models::make_model(kind, 0);
    if (model == "big") net = std::make_shared<BigState>(net, big_params);
    const data::Dataset ds = data_dir.empty() ? data::make_synthetic(samples, 1, 28, 28, 10, 1)
                                              : data::load_fashion_mnist(data_dir, data::Split::Train);
    optim::SGD sgd(net->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
    ddp::Trainer trainer(
        *net, [](const Tensor& out, std::span<const int32_t> y) { return cross_entropy(out, y, Reduction::Sum); }, ds,
        sgd, cfg);
    const ddp::TrainerResult r = trainer.run();
    std::printf("recovery_worker slot %s: step %lld digest %s recoveries %lld %.2f s\n", slot ? slot : "?",
                static_cast<long long>(r.step), r.digest.c_str(), static_cast<long long>(r.recoveries),
                r.train_seconds);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recovery_worker: %s\n", e.what());
    return 1;
  }
}
