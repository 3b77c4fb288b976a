// recovery_worker — the resilient Trainer on the reference MLP or CNN (models/), for
// recovery_bench.py. Synthetic Fashion-MNIST-shaped data by default (no load time in the
// measurement), or the real data with --data-dir.
//   recovery_worker --model mlp|cnn --audit-dir DIR [--steps N] [--batch B] [--samples N]
//                   [--data-dir D] [--threads T] [--no-overlap] [--bucket-mib M]
//                   [--ckpt-dir D --ckpt-every N [--resume]]
#include <cstdio>
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

int main(int argc, char** argv) {
  ddp::TrainerConfig cfg;
  cfg.steps = 200;
  cfg.global_batch = 128;
  std::string model = "mlp", audit_dir, data_dir;
  int64_t samples = 8192;
  int threads = 1;
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
      else if (f == "--threads") threads = std::stoi(val());
      else if (f == "--no-overlap") cfg.reducer.overlap = false;
      else if (f == "--bucket-mib") cfg.reducer.bucket_cap_bytes = std::stoull(val()) << 20;
      else if (f == "--audit-dir") audit_dir = val();
      else if (f == "--ckpt-dir") cfg.ckpt_dir = val();
      else if (f == "--ckpt-every") cfg.ckpt_every = std::stoll(val());
      else if (f == "--resume") cfg.resume = true;
      else throw InvalidInput(str("unknown option ", f));
    }
    if (model != "mlp" && model != "cnn") throw InvalidInput(str("--model ", model, ": expected mlp or cnn"));
    const char* slot = std::getenv("RINGFENCE_SLOT");
    const char* inc = std::getenv("RINGFENCE_INCARNATION");
    if (!audit_dir.empty()) {
      const std::string tag = str("slot", slot ? slot : "x", "-inc", inc ? inc : "x");
      cfg.audit_log = audit_dir + "/audit-" + tag + ".jsonl";
      cfg.flight_recorder = audit_dir + "/flight-" + tag + ".jsonl";
    }
    kernels::cpu::set_num_threads(threads);
    const auto kind = model == "mlp" ? models::ModelKind::MLP : models::ModelKind::CNN;
    cfg.model_name = models::model_name(kind);
    auto net = models::make_model(kind, 0);
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
