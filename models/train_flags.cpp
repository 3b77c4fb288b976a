#include "models/train_flags.h"

#include <charconv>
#include <memory>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "base/cli.h"
#include "base/str.h"
#include "comm/communicator.h"
#include "core/device.h"

namespace rf::models {
namespace {

// Numbers are ours: CLI11's integers also take hex, octal and leading blanks (base/cli.h).
int64_t parse_int(const std::string& flag, const std::string& v, int64_t min) {
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty())
    throw FlagError(str(flag, ": '", v, "' is not an integer"));
  if (out < min) throw FlagError(str(flag, ": ", out, " is below the minimum ", min));
  return out;
}

// Decimal as written (from_chars: no leading blanks, no hex, no locale).
float parse_float(const std::string& flag, const std::string& v) {
  double d = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), d, std::chars_format::general);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty() || !std::isfinite(d) || d < 0)
    throw FlagError(str(flag, ": '", v, "' is not a non-negative number"));
  return static_cast<float>(d);
}

// "cpu", "cuda" (any_gpu) or "cuda:N".
void parse_device_flag(const std::string& flag, const std::string& v, TrainOptions& o) {
  try {
    o.device = parse_device(v);
  } catch (const InvalidInput&) {
    throw FlagError(str(flag, ": '", v, "' is not cpu, cuda or cuda:N"));
  }
  o.any_gpu = v == "cuda";
}

comm::Backend parse_backend_flag(const std::string& flag, const std::string& v) {
  try {
    return comm::parse_backend(v);
  } catch (const InvalidInput&) {
    throw FlagError(str(flag, ": '", v, "' is not ucx or nccl"));
  }
}

using Setter = std::function<void(const std::string& flag, const std::string& value)>;

// The flags' table: names, value meta and help (train_usage prints it from here), and what
// each value sets. `given` collects the flags that appeared.
void declare(CLI::App& app, std::map<const CLI::Option*, Setter>& setters, TrainOptions& o, bool& help,
             std::set<std::string>& given) {
  const std::string name = std::string("train_") + model_name(o.model);
  app.description(name + " — train the reference " + model_name(o.model) +
                  " on Fashion-MNIST (CPU or GPU; one process,\n"
                  "or data-parallel and fault-tolerant under `ringfence run -n N -- " + name + "`)\n");
  app.formatter(std::make_shared<rf::cli::Help>(name + " [flags]", 21));
  app.set_help_flag();  // --help is ours: parsing goes on, so a bad flag is still reported
  auto value = [&](const std::string& flag, const std::string& meta, const std::string& text, Setter set) {
    CLI::Option* opt = rf::cli::value_flag(app, flag, meta, text);
    setters[opt] = [set, &given](const std::string& f, const std::string& v) {
      if (v.empty()) throw FlagError(str(f, ": empty value"));
      set(f, v);
      given.insert(f);
    };
    return opt;
  };
  auto toggle = [&](const std::string& flag, const std::string& text, std::function<void()> set) {
    CLI::Option* opt = rf::cli::toggle(app, flag, text);
    setters[opt] = [set, &given](const std::string& f, const std::string&) { set(), given.insert(f); };
    return opt;
  };
  value("--epochs", "N", "epochs over the training set (default 1)", [&](auto& f, auto& v) { o.epochs = parse_int(f, v, 1); });
  value("--batch", "N", "global batch size (default 128)", [&](auto& f, auto& v) { o.batch = parse_int(f, v, 1); });
  value("--lr", "X", "SGD learning rate (default 0.05)", [&](auto& f, auto& v) { o.lr = parse_float(f, v); });
  value("--momentum", "X", "SGD momentum (default 0.9)", [&](auto& f, auto& v) { o.momentum = parse_float(f, v); });
  value("--seed", "N", "model init and batch order (default 0)",
        [&](auto& f, auto& v) { o.seed = static_cast<uint64_t>(parse_int(f, v, 0)); });
  value("--data-dir", "DIR", "Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)",
        [&](auto&, auto& v) { o.data_dir = v; });
  value("--threads", "N", "GEMM threads (default 1)", [&](auto& f, auto& v) { o.threads = static_cast<int>(parse_int(f, v, 1)); });
  value("--device", "D",
        "cpu, cuda or cuda:N: where the model, its gradients, the optimizer\n"
        "state and each batch live (default cpu). cuda is cuda:0 by hand;\n"
        "under ringfence run, local rank i takes GPU i mod (GPUs on the\n"
        "host). Without that GPU: an error before training (exit 2)",
        [&](auto& f, auto& v) { parse_device_flag(f, v, o); });
  value("--log-interval", "N", "print step, loss, samples/s every N steps (default 50, 0 = quiet)",
        [&](auto& f, auto& v) { o.log_interval = parse_int(f, v, 0); });
  value("--max-steps", "N", "stop after N steps", [&](auto& f, auto& v) { o.max_steps = parse_int(f, v, 0); });
  value("--synthetic", "N", "train on N synthetic samples instead of Fashion-MNIST",
        [&](auto& f, auto& v) { o.synthetic = parse_int(f, v, 1); });
  value("--init", "FILE", "initial parameters from safetensors (PyTorch names)", [&](auto&, auto& v) { o.init_file = v; });
  value("--metrics", "FILE",
        "write a JSON summary (test_accuracy, final_loss, steps,\n"
        "samples_per_sec, state_digest, ...)",
        [&](auto&, auto& v) { o.metrics_file = v; });
  value("--loss-log", "FILE", "JSON lines {\"step\":s,\"loss\":x} (mean over the global batch)",
        [&](auto&, auto& v) { o.loss_log = v; });
  value("--batch-log", "FILE", "JSON lines {\"step\":s,\"indices\":[...]} (global batch samples)",
        [&](auto&, auto& v) { o.batch_log = v; });
  value("--ckpt-dir", "DIR",
        "write checkpoints to DIR (ckpt-<step>.safetensors), at the end\n"
        "of training and every --ckpt-every steps; one writer per DIR;\n"
        "a DIR that already holds checkpoints needs --resume",
        [&](auto&, auto& v) { o.ckpt_dir = v; });
  value("--ckpt-every", "N", "also checkpoint every N steps (default 0: only at the end)",
        [&](auto& f, auto& v) { o.ckpt_every = parse_int(f, v, 0); });
  value("--ckpt-keep", "K", "keep the K newest checkpoints (default 3)", [&](auto& f, auto& v) { o.ckpt_keep = parse_int(f, v, 1); });
  value("--ckpt-staging", "DIR",
        "where the final checkpoint is staged when the checkpoint\n"
        "directory has room for it only without the older ones\n"
        "(default /var/tmp; none: never)",
        [&](auto&, auto& v) { o.ckpt_staging = v == "none" ? std::string() : v; });
  toggle("--resume",
         "continue from the newest valid checkpoint in --ckpt-dir\n"
         "(damaged ones are skipped with a warning; none: start fresh;\n"
         "an intact one of another model or optimizer: an error)",
         [&] { o.resume = true; });
  value("--resume-from", "FILE", "continue from this checkpoint (an error if it is not valid)",
        [&](auto&, auto& v) { o.resume_from = v; });
  value("--ckpt-test-pause-in-write", "STEP",
        "(tests) stop half-way through writing the\n"
        "checkpoint of STEP and wait to be killed",
        [&](auto& f, auto& v) { o.ckpt_test_pause_step = parse_int(f, v, 0); });
  toggle("--exact",
         "exact mode: each step's global batch in --micro-shards pieces,\n"
         "each computed alone, the gradients summed in integers: the same\n"
         "bits for any number of ranks and any shrink, grow or resume on\n"
         "another W (docs/exact.md; CPU only; by hand: one rank, the same\n"
         "bits)",
         [&] { o.exact = true; });
  value("--micro-shards", "M",
        "exact mode's pieces per global batch (default 8; it must divide\n"
        "--batch, and at most M ranks start the job)",
        [&](auto& f, auto& v) { o.micro_shards = static_cast<int>(parse_int(f, v, 1)); });
  toggle("--cuda-graph",
         "by hand, one process, --device cuda: capture the step (forward,\n"
         "backward, SGD) as a CUDA graph once its batch shape is stable and\n"
         "replay it (the same bits as without; docs/gpu.md). Off by default:\n"
         "its speed is not measured yet. Not under ringfence run",
         [&] { o.cuda_graph = true; });
  toggle("--help", "this text", [&] { help = true; });
  toggle("-h", "", [&] { help = true; })->group("");
  const std::string run_only = "Under ringfence run only";
  value("--verify-every", "N",
        "all ranks compare state digests every N steps; divergence stops\n"
        "the job (default 0: off)",
        [&](auto& f, auto& v) { o.verify_every = parse_int(f, v, 0); })
      ->group(run_only);
  value("--audit-log", "FILE",
        "every worker appends one JSON line per state change (apply,\n"
        "transfer, ...) tagged with its slot and incarnation",
        [&](auto&, auto& v) { o.audit_log = v; })
      ->group(run_only);
  value("--flight-dir", "DIR",
        "on a failure, comm's flight records go to\n"
        "DIR/flight-slot<S>-inc<I>.jsonl instead of stderr",
        [&](auto&, auto& v) { o.flight_dir = v; })
      ->group(run_only);
  value("--backend", "B",
        "ucx or nccl: how gradients are all-reduced (default ucx; on a\n"
        "GPU through pinned host memory, so ranks may share a GPU); nccl\n"
        "needs --device cuda and a GPU of its own for each local rank",
        [&](auto& f, auto& v) { o.backend = parse_backend_flag(f, v); })
      ->group(run_only);
  app.footer(
      "By hand, SIGTERM / SIGINT: stop after the current step (checkpointed with\n"
      "--ckpt-dir), exit 0. Under ringfence run, Ctrl-C the launcher instead.\n"
      "Under ringfence run, rank 0 prints the test accuracy and writes --metrics,\n"
      "slot 0 writes --loss-log and --batch-log; --resume-from is not available there.\n");
}

}  // namespace

std::string train_usage(ModelKind kind) {
  CLI::App app;
  std::map<const CLI::Option*, Setter> setters;
  TrainOptions o;
  o.model = kind;
  bool help = false;
  std::set<std::string> given;
  declare(app, setters, o, help, given);
  return app.help();
}

ParsedFlags parse_train_flags(const std::vector<std::string>& args, ModelKind kind) {
  ParsedFlags out;
  TrainOptions& o = out.options;
  o.model = kind;
  CLI::App app;
  std::map<const CLI::Option*, Setter> setters;
  std::set<std::string> given;
  declare(app, setters, o, out.help, given);
  // `--ckpt-dir --resume` would otherwise make a directory named "--resume". A value that
  // starts with "--" is still possible as --flag=--value.
  const auto next_is_flag = [](const std::string& next) { return next.rfind("--", 0) == 0; };
  const auto refuse = [](const rf::cli::Problem& p) {
    switch (p.kind) {
      case rf::cli::Problem::Unknown: throw FlagError(str("unknown flag '", p.arg, "' (see --help)"));
      case rf::cli::Problem::MissingValue: throw FlagError(str(p.arg, ": missing value"));
      case rf::cli::Problem::NextIsFlag:
        throw FlagError(str(p.arg, ": missing value (the next argument is the flag '", p.next, "'; write ", p.arg,
                            "=VALUE for a value starting with --)"));
      default: throw FlagError(str(p.arg, " takes no value"));
    }
  };
  try {
    rf::cli::parse_checked(
        app, args, next_is_flag,
        [&](const CLI::Option& f, const std::string& v) { setters.at(&f)(rf::cli::flag_name(f), v); }, refuse);
  } catch (const CLI::ParseError& e) {  // check() leaves CLI11 nothing to refuse
    throw FlagError(e.what());
  }
  if (o.threads > 1024) throw FlagError(str("--threads: ", o.threads, " is too many"));
  if (o.ckpt_dir.empty()) {
    for (const char* f : {"--ckpt-every", "--ckpt-keep", "--ckpt-staging", "--resume", "--ckpt-test-pause-in-write"})
      if (given.count(f)) throw FlagError(str(f, ": needs --ckpt-dir"));
  }
  if (o.backend == comm::Backend::Nccl && o.device.is_cpu())
    throw FlagError("--backend nccl: needs a GPU (--device cuda or cuda:N)");
  if (o.resume && !o.resume_from.empty()) throw FlagError("--resume and --resume-from: give one of them");
  if (given.count("--micro-shards") && !o.exact) throw FlagError("--micro-shards: needs --exact");
  if (o.exact && o.micro_shards > o.batch)
    throw FlagError(str("--micro-shards ", o.micro_shards, " is more than the global batch (--batch ", o.batch, ")"));
  if (o.exact && o.batch % o.micro_shards != 0)
    throw FlagError(str("--micro-shards ", o.micro_shards, " does not divide the global batch (--batch ", o.batch,
                        "): every micro-shard must hold the same number of samples"));
  if (o.exact && !o.device.is_cpu()) throw FlagError("--exact: runs on the CPU only (--device cpu)");
  if (o.cuda_graph && o.device.is_cpu()) throw FlagError("--cuda-graph: needs --device cuda or cuda:N");
  return out;
}

}  // namespace rf::models
