#include "models/train_flags.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "base/str.h"
#include "comm/communicator.h"
#include "core/device.h"

namespace rf::models {
namespace {

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

}  // namespace

std::string train_usage(ModelKind kind) {
  const std::string name = std::string("train_") + model_name(kind);
  return name + " — train the reference " + model_name(kind) +
         " on Fashion-MNIST (CPU or GPU; one process,\n"
         "or data-parallel and fault-tolerant under `ringfence run -n N -- " + name + "`)\n"
         "usage: " + name + " [flags]\n"
         "  --epochs N         epochs over the training set (default 1)\n"
         "  --batch N          global batch size (default 128)\n"
         "  --lr X             SGD learning rate (default 0.05)\n"
         "  --momentum X       SGD momentum (default 0.9)\n"
         "  --seed N           model init and batch order (default 0)\n"
         "  --data-dir DIR     Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)\n"
         "  --threads N        GEMM threads (default 1)\n"
         "  --device D         cpu, cuda or cuda:N: where the model, its gradients, the optimizer\n"
         "                     state and each batch live (default cpu). cuda is cuda:0 by hand;\n"
         "                     under ringfence run, local rank i takes GPU i mod (GPUs on the\n"
         "                     host). Without that GPU: an error before training (exit 2)\n"
         "  --log-interval N   print step, loss, samples/s every N steps (default 50, 0 = quiet)\n"
         "  --max-steps N      stop after N steps\n"
         "  --synthetic N      train on N synthetic samples instead of Fashion-MNIST\n"
         "  --init FILE        initial parameters from safetensors (PyTorch names)\n"
         "  --metrics FILE     write a JSON summary (test_accuracy, final_loss, steps,\n"
         "                     samples_per_sec, state_digest, ...)\n"
         "  --loss-log FILE    JSON lines {\"step\":s,\"loss\":x} (mean over the global batch)\n"
         "  --batch-log FILE   JSON lines {\"step\":s,\"indices\":[...]} (global batch samples)\n"
         "  --ckpt-dir DIR     write checkpoints to DIR (ckpt-<step>.safetensors), at the end\n"
         "                     of training and every --ckpt-every steps; one writer per DIR;\n"
         "                     a DIR that already holds checkpoints needs --resume\n"
         "  --ckpt-every N     also checkpoint every N steps (default 0: only at the end)\n"
         "  --ckpt-keep K      keep the K newest checkpoints (default 3)\n"
         "  --resume           continue from the newest valid checkpoint in --ckpt-dir\n"
         "                     (damaged ones are skipped with a warning; none: start fresh;\n"
         "                     an intact one of another model or optimizer: an error)\n"
         "  --resume-from FILE continue from this checkpoint (an error if it is not valid)\n"
         "  --ckpt-test-pause-in-write STEP  (tests) stop half-way through writing the\n"
         "                     checkpoint of STEP and wait to be killed\n"
         "  --help             this text\n"
         "Under ringfence run only:\n"
         "  --verify-every N   all ranks compare state digests every N steps; divergence stops\n"
         "                     the job (default 0: off)\n"
         "  --audit-log FILE   every worker appends one JSON line per state change (apply,\n"
         "                     transfer, ...) tagged with its slot and incarnation\n"
         "  --flight-dir DIR   on a failure, comm's flight records go to\n"
         "                     DIR/flight-slot<S>-inc<I>.jsonl instead of stderr\n"
         "  --backend B        ucx or nccl: how gradients are all-reduced (default ucx; on a\n"
         "                     GPU through pinned host memory, so ranks may share a GPU); nccl\n"
         "                     needs --device cuda and a GPU of its own for each local rank\n"
         "By hand, SIGTERM / SIGINT: stop after the current step (checkpointed with\n"
         "--ckpt-dir), exit 0. Under ringfence run, Ctrl-C the launcher instead.\n"
         "Under ringfence run, rank 0 prints the test accuracy and writes --metrics,\n"
         "slot 0 writes --loss-log and --batch-log; --resume-from is not available there.\n";
}

ParsedFlags parse_train_flags(const std::vector<std::string>& args, ModelKind kind) {
  ParsedFlags out;
  TrainOptions& o = out.options;
  o.model = kind;
  using Setter = std::function<void(const std::string& flag, const std::string& v)>;
  const std::map<std::string, Setter> setters = {
      {"--epochs", [&](auto& f, auto& v) { o.epochs = parse_int(f, v, 1); }},
      {"--batch", [&](auto& f, auto& v) { o.batch = parse_int(f, v, 1); }},
      {"--lr", [&](auto& f, auto& v) { o.lr = parse_float(f, v); }},
      {"--momentum", [&](auto& f, auto& v) { o.momentum = parse_float(f, v); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = static_cast<uint64_t>(parse_int(f, v, 0)); }},
      {"--data-dir", [&](auto&, auto& v) { o.data_dir = v; }},
      {"--threads", [&](auto& f, auto& v) { o.threads = static_cast<int>(parse_int(f, v, 1)); }},
      {"--device", [&](auto& f, auto& v) { parse_device_flag(f, v, o); }},
      {"--backend", [&](auto& f, auto& v) { o.backend = parse_backend_flag(f, v); }},
      {"--log-interval", [&](auto& f, auto& v) { o.log_interval = parse_int(f, v, 0); }},
      {"--max-steps", [&](auto& f, auto& v) { o.max_steps = parse_int(f, v, 0); }},
      {"--synthetic", [&](auto& f, auto& v) { o.synthetic = parse_int(f, v, 1); }},
      {"--init", [&](auto&, auto& v) { o.init_file = v; }},
      {"--metrics", [&](auto&, auto& v) { o.metrics_file = v; }},
      {"--loss-log", [&](auto&, auto& v) { o.loss_log = v; }},
      {"--batch-log", [&](auto&, auto& v) { o.batch_log = v; }},
      {"--ckpt-dir", [&](auto&, auto& v) { o.ckpt_dir = v; }},
      {"--ckpt-every", [&](auto& f, auto& v) { o.ckpt_every = parse_int(f, v, 0); }},
      {"--ckpt-keep", [&](auto& f, auto& v) { o.ckpt_keep = parse_int(f, v, 1); }},
      {"--resume-from", [&](auto&, auto& v) { o.resume_from = v; }},
      {"--verify-every", [&](auto& f, auto& v) { o.verify_every = parse_int(f, v, 0); }},
      {"--audit-log", [&](auto&, auto& v) { o.audit_log = v; }},
      {"--flight-dir", [&](auto&, auto& v) { o.flight_dir = v; }},
      {"--ckpt-test-pause-in-write", [&](auto& f, auto& v) { o.ckpt_test_pause_step = parse_int(f, v, 0); }},
  };
  std::set<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    if (flag == "--help" || flag == "-h") {
      out.help = true;
      continue;
    }
    if (flag == "--resume") {  // the one flag without a value
      o.resume = true;
      given.insert(flag);
      continue;
    }
    if (flag.rfind("--resume=", 0) == 0) throw FlagError("--resume takes no value");
    const size_t eq = flag.find('=');
    bool inline_value = false;
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    auto it = setters.find(flag);
    if (it == setters.end()) throw FlagError(str("unknown flag '", args[i], "' (see --help)"));
    if (!inline_value) {
      if (i + 1 >= args.size()) throw FlagError(str(flag, ": missing value"));
      // `--ckpt-dir --resume` would otherwise make a directory named "--resume". A value
      // that starts with "--" is still possible as --flag=--value.
      if (args[i + 1].rfind("--", 0) == 0)
        throw FlagError(str(flag, ": missing value (the next argument is the flag '", args[i + 1],
                            "'; write ", flag, "=VALUE for a value starting with --)"));
      value = args[++i];
    }
    if (value.empty()) throw FlagError(str(flag, ": empty value"));
    it->second(flag, value);
    given.insert(flag);
  }
  if (o.threads > 1024) throw FlagError(str("--threads: ", o.threads, " is too many"));
  if (o.ckpt_dir.empty()) {
    for (const char* f : {"--ckpt-every", "--ckpt-keep", "--resume", "--ckpt-test-pause-in-write"})
      if (given.count(f)) throw FlagError(str(f, ": needs --ckpt-dir"));
  }
  if (o.backend == comm::Backend::Nccl && o.device.is_cpu())
    throw FlagError("--backend nccl: needs a GPU (--device cuda or cuda:N)");
  if (o.resume && !o.resume_from.empty()) throw FlagError("--resume and --resume-from: give one of them");
  return out;
}

}  // namespace rf::models
