#include "models/distributed_train.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <utility>

#include "base/error.h"
#include "base/str.h"
#include "core/data/data.h"
#include "ddp/trainer.h"
#include "elastic/client.h"
#include "elastic/errors.h"
#include "models/train_flags.h"
#include "models/train_setup.h"

namespace rf::models {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return *end ? fallback : x;  // the Trainer's own parsing names a malformed value
}

// A per-step log of the reporting worker. A replacement of slot 0 (incarnation > 0)
// appends to what its predecessor wrote instead of wiping it.
std::ofstream open_step_log(const std::string& path, const char* flag, int64_t incarnation) {
  if (incarnation == 0) return open_output(path, flag);
  std::ofstream f(path, std::ios::app);
  if (!f) throw InvalidInput(str(flag, " ", path, ": cannot open for appending"));
  return f;
}

}  // namespace

LocalPlacement local_placement_from_env() {
  LocalPlacement l;
  for (auto [name, out] : {std::pair{"RINGFENCE_LOCAL_RANK", &l.local_rank}, std::pair{"RINGFENCE_LOCAL_WORLD", &l.local_world}}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end || x < 0 || x > 1'000'000) throw FlagError(str(name, "='", v, "' is not a count"));
    *out = static_cast<int>(x);
  }
  return l;
}

std::pair<int, int64_t> worker_id_from_env() {
  return {static_cast<int>(env_int("RINGFENCE_SLOT", 0)), env_int("RINGFENCE_INCARNATION", 0)};
}

void stop_job_before_start(const std::string& error, std::ostream& err) {
  try {
    elastic::Client client(elastic::ClientOptions::from_env());
    client.join();
    client.fatal(error);
    client.close();
  } catch (const elastic::Refused&) {
    // The join refused: the job is STOPPED already, by another worker's same report (the
    // launcher prints it), or this worker may not join at all (the start-up rule ends it).
  } catch (const std::exception& e) {
    err << "ringfence worker: could not tell the coordinator: " << e.what() << "\n" << std::flush;
  }
}

TrainResult train_distributed(const TrainOptions& opt, std::ostream& log, bool alone) {
  if (!opt.resume_from.empty())
    throw InvalidInput(alone ? "--resume-from: not supported with --exact by hand (use ringfence run -n 1 with --resume)"
                             : "--resume-from: not supported under ringfence run (use --ckpt-dir DIR --resume)");
  if (alone && opt.resume) throw InvalidInput("--resume with --exact: needs ringfence run (ringfence run -n 1 ...)");
  if (opt.ckpt_test_pause_step >= 0)
    throw InvalidInput(str("--ckpt-test-pause-in-write: not supported ", alone ? "with --exact" : "under ringfence run"));
  const int slot = alone ? 0 : static_cast<int>(env_int("RINGFENCE_SLOT", -1));
  const int64_t incarnation = env_int("RINGFENCE_INCARNATION", 0);
  const bool job_ran = env_int("RINGFENCE_JOB_RAN", 0) == 1;  // started into a job that already ran
  const bool reporter = slot == 0;
  const std::string prog = str("train_", model_name(opt.model));

  // Every worker checks the outputs now: rank 0 of the last generation writes --metrics,
  // and that may be any of them (before, a bad path failed after training and the job
  // ended DONE); slot 0 writes the step logs, but if it alone failed the others would wait
  // out --min-world-timeout (30 s by default) for it.
  if (!opt.metrics_file.empty()) check_output_writable(opt.metrics_file, "--metrics");
  if (!opt.loss_log.empty()) check_output_writable(opt.loss_log, "--loss-log");
  if (!opt.batch_log.empty()) check_output_writable(opt.batch_log, "--batch-log");
  const data::Dataset train_set = load_train_set(opt);
  // The test set is used only at the end, by that rank 0. Every worker started before the
  // job first ran loads it now, so a missing or damaged test file fails the job at its
  // start, not after training: the first incarnations, and a restart after a start-up
  // error, which must fail the same way for the launcher to end the job (docs/launcher.md).
  // A restart into a job that already ran does not: the job's start checked the same
  // files, and its start-up is on the recovery's critical path (30-50 ms with
  // Fashion-MNIST); it loads the test set at the end if it is rank 0 then.
  // Synthetic data cannot fail and is made at the end, by rank 0 only.
  std::optional<data::Dataset> test_set;
  if (opt.synthetic == 0 && !job_ran) test_set = load_test_set(opt);
  auto model = build_model(opt);
  optim::SGD sgd(model->named_parameters(), sgd_options(opt));
  const data::Sampler sampler(train_set.n, opt.batch, opt.seed);  // the Trainer's batches (R3)
  int64_t total_steps = opt.epochs * sampler.steps_per_epoch();
  if (opt.max_steps >= 0) total_steps = std::min(total_steps, opt.max_steps);

  std::ofstream loss_log, batch_log;
  if (reporter && !opt.loss_log.empty()) loss_log = open_step_log(opt.loss_log, "--loss-log", incarnation);
  if (reporter && !opt.batch_log.empty()) batch_log = open_step_log(opt.batch_log, "--batch-log", incarnation);

  ddp::TrainerConfig cfg;
  cfg.model_name = model_name(opt.model);
  cfg.backend = opt.backend;  // the device is the model's (build_model put it on opt.device)
  cfg.global_batch = opt.batch;
  cfg.seed = opt.seed;
  cfg.steps = total_steps;
  cfg.verify_every = opt.verify_every;
  cfg.micro_shards = opt.exact ? opt.micro_shards : 0;
  cfg.fault_tolerance = !alone;
  cfg.stop_requested = alone ? opt.stop_requested : nullptr;  // by hand, SIGINT / SIGTERM stop it
  cfg.audit_log = opt.audit_log;
  if (!opt.flight_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.flight_dir, ec);
    if (ec) throw InvalidInput(str("--flight-dir ", opt.flight_dir, ": ", ec.message()));
    cfg.flight_recorder = str(opt.flight_dir, "/flight-slot", slot, "-inc", incarnation, ".jsonl");
  }
  cfg.log_interval = opt.log_interval;  // rank 0 prints step, generation, W, loss, samples/s
  cfg.ckpt_dir = opt.ckpt_dir;
  cfg.ckpt_every = opt.ckpt_every;
  cfg.ckpt_keep = opt.ckpt_keep;
  cfg.ckpt_staging = opt.ckpt_staging;
  cfg.resume = opt.resume;
  const ckpt::SnapshotMeta meta = checkpoint_meta(opt, train_set.n);  // as one process records it
  cfg.ckpt_optimizer_hparams = meta.optimizer_hparams;
  cfg.ckpt_data_order = meta.data_order;
  int64_t applied_samples = 0;  // by this process (a replacement counts from its join)
  cfg.on_step = [&](int64_t s, double loss) {
    // The last batch of an epoch may be short (the sampler keeps it).
    const int64_t in_epoch = s % sampler.steps_per_epoch();
    applied_samples += std::min<int64_t>(opt.batch, train_set.n - in_epoch * opt.batch);
    if (loss_log.is_open()) loss_log << "{\"step\":" << s << ",\"loss\":" << nlohmann::json(loss).dump() << "}\n";
    if (batch_log.is_open())
      batch_log << "{\"step\":" << s << ",\"indices\":" << nlohmann::json(sampler.global_batch(s)).dump() << "}\n";
  };

  if (reporter && incarnation == 0)
    log << "== " << prog << (alone ? " alone (exact mode, one rank)" : " under ringfence run") << ": "
        << model->num_parameters() << " parameters, " << train_set.n
        << " training samples, global batch " << opt.batch << ", " << total_steps << " steps, " << opt.threads
        << " thread(s) per rank"
        << (opt.device.is_cpu() ? std::string()
                                : str(", on ", opt.any_gpu ? std::string("the GPU of each local rank") : device_name(opt.device),
                                      ", backend ", comm::backend_name(opt.backend)))
        << "\n"
        << std::flush;
  ddp::Trainer trainer(
      *model, [](const Tensor& out, std::span<const int32_t> y) { return classification_loss(out, y, Reduction::Sum); },
      train_set, sgd, cfg);
  const ddp::TrainerResult tr = trainer.run();

  TrainResult r;
  r.steps = tr.step + 1;
  r.final_loss = tr.final_loss;
  r.samples = applied_samples;
  r.train_seconds = tr.train_seconds;
  r.samples_per_sec = tr.train_seconds > 0 ? applied_samples / tr.train_seconds : 0.0;
  r.state_digest = tr.digest;
  r.resumed_step = tr.resumed_step;
  r.world_size = tr.world;
  r.generation = tr.generation;
  r.recoveries = tr.recoveries;
  r.stopped = !tr.standby && r.steps < total_steps;
  if (loss_log.is_open()) loss_log.flush();
  if (batch_log.is_open()) batch_log.flush();
  if (tr.standby) {
    log << "== " << prog << " slot " << slot << ": the job ended without needing it (a spare, or a restart that arrived after the end)\n" << std::flush;
    return r;
  }
  log << "== " << prog << " slot " << slot << " incarnation " << incarnation << ": step " << tr.step
      << ", generation " << tr.generation << ", world " << tr.world << ", recoveries " << tr.recoveries
      << (opt.device.is_cpu() ? std::string() : str(", on ", device_name(opt.device))) << ", state "
      << tr.digest << "\n"
      << std::flush;
  // Rank 0 of the last generation evaluates and writes --metrics: slot 0 unless the group
  // shrank without it (every replica holds the same S, R4, so any one would do).
  if (trainer.progress().rank == 0) {
    if (!test_set) test_set = load_test_set(opt);
    finish_run(opt, *model, *test_set, r, log);
  }
  return r;
}

}  // namespace rf::models
