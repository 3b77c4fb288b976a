// recovery_worker — the resilient Trainer on the reference MLP or CNN (models/), or a
// synthetic state of --big-params parameters (--model big: the MLP plus one large
// parameter), for recovery_bench.py. Synthetic Fashion-MNIST-shaped data by default (no
// load time in the measurement), or the real data with --data-dir.
//   recovery_worker --model mlp|cnn|big --audit-dir DIR [--steps N] [--batch B] [--samples N]
//                   [--big-params N (default 100M)]
//                   [--data-dir D] [--threads T] [--no-overlap] [--bucket-mib M]
//                   [--ckpt-dir D --ckpt-every N [--resume]]
//   recovery_worker --model big --profile    (no job: times the start-up and the state
//                   operations of one recovery in this process, one line each, ms)
// Flags: bench/flags.h (--help; a bad value or an unknown flag is a usage error, exit 2).
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/clock.h"
#include "base/str.h"
#include "bench/flags.h"
#include "core/data/data.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "ddp/reducer.h"
#include "ddp/train_state.h"
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
double ms_since(TimePoint t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Where a replacement's start-up and one recovery's state work go, without a job: each
// operation timed once, in the order a recovery runs them.
int profile(const std::string& model, int64_t big_params, int64_t samples) {
  TimePoint t = Clock::now();
  const auto kind = model == "cnn" ? models::ModelKind::CNN : models::ModelKind::MLP;
  std::shared_ptr<nn::Module> net = models::make_model(kind, 0);
  if (model == "big") net = std::make_shared<BigState>(net, big_params);
  std::printf("start-up  model (parameters initialised)      %8.1f ms\n", ms_since(t));
  t = Clock::now();
  optim::SGD sgd(net->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  std::printf("start-up  optimizer (momentum zeroed)        %8.1f ms\n", ms_since(t));
  t = Clock::now();
  ddp::Reducer red(net->named_parameters(), {});
  std::printf("start-up  reducer (gradient buckets zeroed)  %8.1f ms\n", ms_since(t));
  t = Clock::now();
  const data::Dataset ds = data::make_synthetic(samples, 1, 28, 28, 10, 1);
  std::printf("start-up  synthetic data (%lld samples)      %8.1f ms\n", static_cast<long long>(samples), ms_since(t));
  ddp::TrainState st(*net, sgd, "big-state");
  st.set_step(0);
  std::vector<std::byte> staging, other;
  t = Clock::now();
  st.prepare_staging(staging);
  std::printf("start-up  staging: populate + zero fill (the trainer's pre-touch, own thread) %8.1f ms  (%.0f MB)\n",
              ms_since(t), static_cast<double>(staging.size()) / 1e6);
  {
    std::vector<std::byte> touched;
    t = Clock::now();
    touched.resize(staging.size());
    std::printf("(the same size touched by a zero fill alone, as before, for scale) %8.1f ms\n", ms_since(t));
  }
  // As in a recovery: a survivor's report computes the digest of S once (the memo), and
  // its image reuses it.
  t = Clock::now();
  const std::string d = st.current_digest();
  std::printf("recovery  digest of S (the report's, memoised) %8.1f ms\n", ms_since(t));
  t = Clock::now();
  st.write_image(1, 2, staging);
  std::printf("recovery  source: image into the warm buffer (one pass: copy, CRCs, image digest) %8.1f ms\n",
              ms_since(t));
  t = Clock::now();
  other.assign(staging.begin(), staging.end());
  std::printf("(a copy into a cold buffer, for scale)       %8.1f ms\n", ms_since(t));
  {
    // The same into a cold buffer backed by transparent huge pages (THP "madvise" mode):
    // the reserve maps without touching, madvise marks the 2 MiB-aligned interior.
    std::vector<std::byte> huge;
    huge.reserve(staging.size());
    const auto a = (reinterpret_cast<uintptr_t>(huge.data()) + (size_t{2} << 20) - 1) & ~((uintptr_t{2} << 20) - 1);
    const auto e = (reinterpret_cast<uintptr_t>(huge.data()) + staging.size()) & ~((uintptr_t{2} << 20) - 1);
    t = Clock::now();
    const int rc = e > a ? ::madvise(reinterpret_cast<void*>(a), e - a, MADV_HUGEPAGE) : -1;
    huge.assign(staging.begin(), staging.end());
    std::printf("(the same, MADV_HUGEPAGE%s)                 %8.1f ms\n", rc == 0 ? "" : " FAILED", ms_since(t));
  }
  t = Clock::now();
  st.restore_verified({staging.data(), staging.size()}, 0, d, "profile");
  std::printf("recovery  receiver: validate (one pass: CRCs, image digest, digest of S) + swap in (R6) %8.1f ms\n",
              ms_since(t));
  t = Clock::now();
  const std::string after = st.current_digest();
  std::printf("recovery  digest after the swap (verify)     %8.1f ms\n", ms_since(t));
  t = Clock::now();
  const bool same = st.digest() == after;
  std::printf("(a fresh pass over S, for scale: %s)          %8.1f ms\n", same ? "equal" : "DIFFERENT", ms_since(t));
  if (!same) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ddp::TrainerConfig cfg;
  cfg.steps = 200;
  cfg.global_batch = 128;
  std::string model = "mlp", audit_dir, data_dir;
  int64_t samples = 8192;
  int threads = 1;
  int64_t big_params = 100'000'000;
  bool prof = false;
  int64_t bucket_mib = -1;
  rf::bench::Flags flags("recovery_worker",
                         "recovery_worker --model mlp|cnn|big [flags]   (a worker of `ringfence run` for "
                         "recovery_bench.py; --profile: no job)");
  flags.text("--model", "mlp|cnn|big", "the reference MLP or CNN, or the MLP plus --big-params (default mlp)", model)
      .text("--audit-dir", "DIR", "audit and flight-recorder logs, one per slot and incarnation (default none)",
            audit_dir)
      .integer("--steps", "train steps (default 200)", cfg.steps, 1)
      .integer("--batch", "global batch (default 128)", cfg.global_batch, 1)
      .integer("--samples", "synthetic samples (default 8192)", samples, 1)
      .integer("--big-params", "parameters of --model big's extra matrix (default 100000000)", big_params, 10)
      .text("--data-dir", "DIR", "real Fashion-MNIST from DIR instead of synthetic data", data_dir)
      .integer("--threads", "GEMM threads (default 1)", threads, 1, 1024)
      .toggle("--no-overlap", "all-reduce after backward instead of overlapping it", [&] { cfg.reducer.overlap = false; })
      .integer("--bucket-mib", "gradient bucket cap in MiB (default: the reducer's)", bucket_mib, 1, 1 << 20)
      .text("--ckpt-dir", "DIR", "checkpoints into DIR (with --ckpt-every)", cfg.ckpt_dir)
      .integer("--ckpt-every", "a checkpoint every N steps (default 0: none)", cfg.ckpt_every, 0)
      .integer("--micro-shards", "exact mode with M micro-shards (default 0: the float sum)", cfg.micro_shards, 0)
      .toggle("--resume", "continue from --ckpt-dir's last checkpoint", [&] { cfg.resume = true; })
      .toggle("--profile", "no job: time the start-up and one recovery's state operations here, one line each",
              [&] { prof = true; });
  if (const int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  if (model != "mlp" && model != "cnn" && model != "big")
    return flags.fail("--model: '" + model + "' is not mlp, cnn or big");
  if (bucket_mib > 0) cfg.reducer.bucket_cap_bytes = static_cast<size_t>(bucket_mib) << 20;
  try {
    kernels::cpu::set_num_threads(threads);
    if (prof) return profile(model, big_params, samples);
    const char* slot = std::getenv("RINGFENCE_SLOT");
    const char* inc = std::getenv("RINGFENCE_INCARNATION");
    if (!audit_dir.empty()) {
      const std::string tag = str("slot", slot ? slot : "x", "-inc", inc ? inc : "x");
      cfg.audit_log = audit_dir + "/audit-" + tag + ".jsonl";
      cfg.flight_recorder = audit_dir + "/flight-" + tag + ".jsonl";
    }
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
