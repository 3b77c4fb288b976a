#include "models/train_setup.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "base/error.h"
#include "base/str.h"
#include "core/data/data.h"
#include "models/evaluate.h"
#include "models/init_file.h"

namespace rf::models {
namespace {

// ": <strerror>" after a failed open, when the library set errno ("" otherwise).
std::string why_not() { return errno ? str(": ", std::strerror(errno)) : std::string(); }

int64_t synthetic_test_size(int64_t n) { return std::clamp<int64_t>(n / 5, 1, 10000); }

// One stream of n + n_test samples: [0, n) trains, the rest tests.
data::Dataset synthetic_part(int64_t n, uint64_t seed, bool test_part) {
  const int64_t n_test = synthetic_test_size(n);
  data::Dataset all = data::make_synthetic(n + n_test, 1, 28, 28, 10, seed);
  const int64_t d = all.sample_size();
  data::Dataset part = all;
  if (test_part) {
    part.n = n_test;
    part.images.assign(all.images.begin() + n * d, all.images.end());
    part.labels.assign(all.labels.begin() + n, all.labels.end());
  } else {
    part.n = n;
    part.images.resize(n * d);
    part.labels.resize(n);
  }
  return part;
}

}  // namespace

namespace {

// Both models take 1x28x28 images: other IDX files would fail in the first forward pass
// as a matmul shape error that names no file.
data::Dataset checked(data::Dataset ds, const TrainOptions& opt, const char* which) {
  if (ds.c != 1 || ds.h != 28 || ds.w != 28) {
    throw InvalidInput(str("--data-dir ", opt.data_dir, ": the ", which, " images are ", ds.c, "x", ds.h, "x", ds.w,
                           ", the ", model_name(opt.model), " takes 1x28x28 (Fashion-MNIST)"));
  }
  return ds;
}

}  // namespace

data::Dataset load_train_set(const TrainOptions& opt) {
  if (opt.synthetic > 0) return synthetic_part(opt.synthetic, opt.seed, false);
  return checked(data::load_fashion_mnist(opt.data_dir, data::Split::Train), opt, "training");
}

data::Dataset load_test_set(const TrainOptions& opt) {
  if (opt.synthetic > 0) return synthetic_part(opt.synthetic, opt.seed, true);
  return checked(data::load_fashion_mnist(opt.data_dir, data::Split::Test), opt, "test");
}

namespace {

// --init's parameters over the seed's, naming the other model when they are its.
void load_init(nn::Sequential& model, const TrainOptions& opt) {
  try {
    load_parameters(model, opt.init_file);
  } catch (const InvalidInput& e) {
    // The likeliest mistake: the other program's weights. Say so.
    const ModelKind other = opt.model == ModelKind::MLP ? ModelKind::CNN : ModelKind::MLP;
    if (!parameters_fit(*make_model(other, 0), opt.init_file)) throw;
    throw InvalidInput(str(e.what(), "\n", opt.init_file, " holds the parameters of the ", model_name(other),
                           " (train_", model_name(other), " --init)"));
  }
}

}  // namespace

void move_parameters(nn::Module& model, Device device) {
  for (auto& [name, p] : model.named_parameters()) {
    if (p.device() == device) continue;
    const Tensor there = p.detach().to(device);
    TensorImpl& impl = p.impl();
    impl.storage = there.impl().storage;
    impl.offset = there.impl().offset;
    impl.device = device;
    impl.grad.reset();  // the host gradient register_parameter made
    impl.grad_offset = 0;
    p.zero_grad();      // allocated on `device`, zeroed there
  }
}

Device model_device(const nn::Module& model) {
  const auto params = model.named_parameters();
  return params.empty() ? Device::CPU : params.front().second.device();
}

std::shared_ptr<nn::Sequential> build_model(const TrainOptions& opt) {
  auto model = make_model(opt.model, opt.seed);
  if (!opt.init_file.empty()) load_init(*model, opt);
  move_parameters(*model, opt.device);
  return model;
}

optim::SgdOptions sgd_options(const TrainOptions& opt) { return {.lr = opt.lr, .momentum = opt.momentum}; }

ckpt::SnapshotMeta checkpoint_meta(const TrainOptions& opt, int64_t train_samples) {
  return {.model = model_name(opt.model),
          .optimizer = "sgd",
          .optimizer_hparams = nlohmann::json{{"lr", opt.lr}, {"momentum", opt.momentum}}.dump(),
          .data_order = nlohmann::json{{"batch", opt.batch}, {"samples", train_samples}, {"seed", opt.seed}}.dump()};
}

Tensor classification_loss(const Tensor& logits, std::span<const int32_t> labels, Reduction reduction) {
  return cross_entropy(logits, labels, reduction);
}

void finish_run(const TrainOptions& opt, nn::Module& model, const data::Dataset& test, TrainResult& r,
                std::ostream& log) {
  const EvalResult ev = evaluate(model, test);
  r.test_accuracy = ev.accuracy();
  r.test_loss = ev.mean_loss;
  char line[200];
  std::snprintf(line, sizeof line,
                "== test accuracy %.2f%% (%lld/%lld), test loss %.4f, final loss %.4f, "
                "%.0f samples/s, state %s\n",
                100.0 * r.test_accuracy, static_cast<long long>(ev.correct), static_cast<long long>(ev.total),
                r.test_loss, r.final_loss, r.samples_per_sec, r.state_digest.c_str());
  log << line << std::flush;
  if (!opt.metrics_file.empty()) write_metrics(opt.metrics_file, opt, r);
}

void write_metrics(const std::string& path, const TrainOptions& opt, const TrainResult& r) {
  nlohmann::json j = {{"model", model_name(opt.model)},
                      {"device", device_name(opt.device)},
                      {"backend", comm::backend_name(opt.backend)},
                      {"test_accuracy", r.test_accuracy},
                      {"test_loss", r.test_loss},
                      {"final_loss", r.final_loss},
                      {"steps", r.steps},
                      {"samples", r.samples},
                      {"train_seconds", r.train_seconds},
                      {"samples_per_sec", r.samples_per_sec},
                      {"state_digest", r.state_digest},
                      {"batch", opt.batch},
                      {"threads", opt.threads},
                      {"seed", opt.seed},
                      {"resumed_step", r.resumed_step},
                      {"stopped", r.stopped},
                      {"checkpoints", r.checkpoints},
                      {"checkpoints_failed", r.checkpoints_failed},
                      {"world_size", r.world_size},
                      {"recoveries", r.recoveries},
                      {"generation", r.generation},
                      {"ckpt_wait_seconds", r.ckpt_wait_seconds}};
  std::ofstream f = open_output(path, "--metrics");
  f << j.dump(2) << "\n";
  if (!f) throw Error(str("--metrics ", path, ": write failed"));
}

std::ofstream open_output(const std::string& path, const char* flag) {
  errno = 0;
  std::ofstream f(path, std::ios::trunc);
  if (!f) throw InvalidInput(str(flag, " ", path, ": cannot open for writing", why_not()));
  return f;
}

void check_output_writable(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string cannot = str(flag, " ", path, ": cannot open for writing");
  if (fs::exists(path, ec)) {
    if (fs::is_directory(path, ec)) throw InvalidInput(str(cannot, ": Is a directory"));
    errno = 0;
    if (!std::ofstream(path, std::ios::app)) throw InvalidInput(str(cannot, why_not()));  // appends nothing
    return;
  }
  // Never created here: several workers check the same path, and one may be creating it.
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) throw InvalidInput(str(cannot, ": no directory ", dir.string()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw InvalidInput(str(cannot, ": ", dir.string(), ": ", std::strerror(errno)));
}

}  // namespace rf::models
