#include "models/train.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <span>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "ckpt/checkpoint_dir.h"
#include "core/data/data.h"
#include "ddp/trainer.h"
#include "models/graph_step.h"
#include "models/launch_env.h"
#include "models/train_setup.h"

namespace rf::models {
namespace {

// Who this process is in the job: by hand slot 0 of one.
struct Worker {
  bool alone = true;
  int slot = 0;
  int64_t incarnation = 0;
  bool job_ran = false;  // started into a job that already ran (a restart)
};

Worker this_worker() {
  if (!launched_by_ringfence()) return {};
  const auto [slot, incarnation] = worker_id_from_env();
  return {.alone = false, .slot = slot, .incarnation = incarnation, .job_ran = job_ran_from_env()};
}

// The flags only one of the two ways honours.
void refuse_unsupported(const TrainOptions& opt, bool alone) {
  if (alone) {
    if (opt.verify_every > 0) throw InvalidInput("--verify-every: only under ringfence run (one process has no replicas)");
    if (!opt.audit_log.empty()) throw InvalidInput("--audit-log: only under ringfence run");
    if (!opt.flight_dir.empty()) throw InvalidInput("--flight-dir: only under ringfence run");
    return;
  }
  if (!opt.resume_from.empty())
    throw InvalidInput("--resume-from: not supported under ringfence run (use --ckpt-dir DIR --resume)");
  if (opt.ckpt_test_pause_step >= 0) throw InvalidInput("--ckpt-test-pause-in-write: not supported under ringfence run");
}

// The test hook of --ckpt-test-pause-in-write: runs on the writer thread half-way through
// the temp file of the chosen step, says so on stderr (the test waits for that line) and
// waits to be killed. It never returns, so the checkpoint is never completed.
ckpt::PartialWriteHook pause_in_write_hook(int64_t step) {
  if (step < 0) return {};
  const std::string temp_name = str(".", ckpt::checkpoint_name(step), ".tmp");
  return [temp_name](const std::string& temp_path, size_t written, size_t total) {
    if (temp_path.size() < temp_name.size() ||
        temp_path.compare(temp_path.size() - temp_name.size(), temp_name.size(), temp_name) != 0)
      return;
    rf::log::info("ckpt", "test hook: paused inside the write of ", temp_path, " (", written, " of ", total, " bytes)");
    for (;;) ::pause();  // until SIGKILL
  };
}

// A per-step log of the reporting worker. A replacement of slot 0 (incarnation > 0)
// appends to what its predecessor wrote instead of wiping it.
std::ofstream open_step_log(const std::string& path, const char* flag, int64_t incarnation) {
  if (incarnation == 0) return open_output(path, flag);
  std::ofstream f(path, std::ios::app);
  if (!f) throw InvalidInput(str(flag, " ", path, ": cannot open for appending"));
  return f;
}

std::string header(const TrainOptions& opt, const Worker& w, int64_t parameters, int64_t samples, int64_t steps) {
  const std::string prog = str("train_", model_name(opt.model));
  if (w.alone)
    return str("== ", prog, ": ", parameters, " parameters, ", samples, " training samples, batch ", opt.batch, ", ",
               steps, " steps, ", opt.threads, " thread(s)",
               opt.exact ? str(", exact mode (", opt.micro_shards, " micro-shards)") : std::string(),
               opt.device.is_cpu() ? std::string() : str(", on ", device_name(opt.device)), "\n");
  return str("== ", prog, " under ringfence run: ", parameters, " parameters, ", samples, " training samples, global batch ",
             opt.batch, ", ", steps, " steps, ", opt.threads, " thread(s) per rank",
             opt.device.is_cpu() ? std::string()
                                 : str(", on ", opt.any_gpu ? std::string("the GPU of each local rank") : device_name(opt.device),
                                       ", backend ", comm::backend_name(opt.backend)),
             "\n");
}

// By hand, what the program says as the trainer goes (its output, on `log`; under ringfence
// run rank 0's trainer logs the progress instead, and the launcher owns the stop): the
// resume, a progress line every --log-interval steps, and the graceful stop. A stop asked
// for (TrainOptions::stop_requested) is passed on to the trainer after the step it is seen
// at, so the trainer stops exactly after the step this says.
class HandOutput {
 public:
  HandOutput(const TrainOptions& opt, int64_t total_steps, int64_t steps_per_epoch, std::ostream& log)
      : opt_(opt), total_(total_steps), per_epoch_(steps_per_epoch), log_(log) {}

  const std::atomic<bool>* trainer_stop() const { return &stop_; }
  bool stopped() const { return stop_.load(); }

  void restored(int64_t step, const std::string& path) {
    log_ << "== resumed from " << path << " (step " << step << "), continuing at step " << step + 1 << "\n";
    if (step + 1 >= total_)
      rf::log::warn("train", "the checkpoint holds step ", step, ", this run has ", total_, " steps: nothing left to train");
  }

  void step(int64_t s, double loss, int64_t samples, int64_t ckpt_failed) {
    window_samples_ += samples;
    int64_t end = total_;  // one past the last step
    if (opt_.stop_requested && opt_.stop_requested->load(std::memory_order_relaxed)) {
      stop_.store(true);
      end = s + 1;
      log_ << "== stop requested: stopping after step " << s << "\n";
    }
    if (opt_.log_interval <= 0 || ((s + 1) % opt_.log_interval != 0 && s + 1 != end)) return;
    const double dt = seconds_since(window_t_);
    char line[160];
    std::snprintf(line, sizeof line, "step %lld/%lld  epoch %lld  loss %.4f  %.0f samples/s",
                  static_cast<long long>(s + 1), static_cast<long long>(total_), static_cast<long long>(s / per_epoch_),
                  loss, dt > 0 ? window_samples_ / dt : 0.0);
    log_ << line << (ckpt_failed ? str("  ckpt failed ", ckpt_failed) : std::string()) << "\n" << std::flush;
    window_t_ = Clock::now();
    window_samples_ = 0;
  }

 private:
  const TrainOptions& opt_;
  int64_t total_, per_epoch_;
  std::ostream& log_;
  std::atomic<bool> stop_{false};
  TimePoint window_t_ = Clock::now();
  int64_t window_samples_ = 0;
};

// The trainer's configuration from the flags (everything but the hooks).
ddp::TrainerConfig trainer_config(const TrainOptions& opt, const Worker& w, int64_t total_steps, int64_t train_samples) {
  ddp::TrainerConfig cfg;
  cfg.model_name = model_name(opt.model);
  cfg.backend = opt.backend;  // the device is the model's (build_model put it on opt.device)
  cfg.global_batch = opt.batch;
  cfg.seed = opt.seed;
  cfg.steps = total_steps;
  cfg.verify_every = opt.verify_every;
  cfg.micro_shards = opt.exact ? opt.micro_shards : 0;
  cfg.fault_tolerance = !w.alone;
  cfg.audit_log = opt.audit_log;
  if (!opt.flight_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.flight_dir, ec);
    if (ec) throw InvalidInput(str("--flight-dir ", opt.flight_dir, ": ", ec.message()));
    cfg.flight_recorder = str(opt.flight_dir, "/flight-slot", w.slot, "-inc", w.incarnation, ".jsonl");
  }
  // Under ringfence run rank 0 logs step, generation, W, loss, samples/s; by hand the
  // program prints its own line (HandOutput).
  cfg.log_interval = w.alone ? 0 : opt.log_interval;
  cfg.ckpt_dir = opt.ckpt_dir;
  cfg.ckpt_every = opt.ckpt_every;
  cfg.ckpt_keep = opt.ckpt_keep;
  cfg.ckpt_staging = opt.ckpt_staging;
  cfg.resume = opt.resume;
  cfg.resume_from = opt.resume_from;
  cfg.ckpt_partial_write_hook = pause_in_write_hook(opt.ckpt_test_pause_step);
  const ckpt::SnapshotMeta meta = checkpoint_meta(opt, train_samples);
  cfg.ckpt_optimizer_hparams = meta.optimizer_hparams;
  cfg.ckpt_data_order = meta.data_order;
  return cfg;
}

}  // namespace

TrainResult train(const TrainOptions& opt, std::ostream& log) {
  const Worker w = this_worker();
  refuse_unsupported(opt, w.alone);
  const bool reporter = w.slot == 0;
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
  // job first ran (and a run by hand) loads it now, so a missing or damaged test file fails
  // at the start, not after training: the first incarnations, and a restart after a start-up
  // error, which must fail the same way for the launcher to end the job (docs/launcher.md).
  // A restart into a job that already ran does not: the job's start checked the same
  // files, and its start-up is on the recovery's critical path (30-50 ms with
  // Fashion-MNIST); it loads the test set at the end if it is rank 0 then.
  // Synthetic data cannot fail and is made at the end, by rank 0 only.
  std::optional<data::Dataset> test_set;
  if (opt.synthetic == 0 && !w.job_ran) test_set = load_test_set(opt);
  auto model = build_model(opt);
  optim::SGD sgd(model->named_parameters(), sgd_options(opt));
  const data::Sampler sampler(train_set.n, opt.batch, opt.seed);  // the Trainer's batches (R3)
  int64_t total_steps = opt.epochs * sampler.steps_per_epoch();
  if (opt.max_steps >= 0) total_steps = std::min(total_steps, opt.max_steps);

  std::ofstream loss_log, batch_log;
  if (reporter && !opt.loss_log.empty()) loss_log = open_step_log(opt.loss_log, "--loss-log", w.incarnation);
  if (reporter && !opt.batch_log.empty()) batch_log = open_step_log(opt.batch_log, "--batch-log", w.incarnation);

  ddp::TrainerConfig cfg = trainer_config(opt, w, total_steps, train_set.n);
  std::optional<HandOutput> hand;
  std::unique_ptr<GraphStep> graph;  // by hand with --cuda-graph: the trainer's local step
  if (w.alone) {
    hand.emplace(opt, total_steps, sampler.steps_per_epoch(), log);
    cfg.stop_requested = hand->trainer_stop();
    if (opt.cuda_graph) {
      graph = std::make_unique<GraphStep>(*model, sgd, opt.device, kReferenceClasses, opt.make_graph);
      cfg.local_step = [&graph](const Tensor& x, std::span<const int32_t> labels) { return graph->run(x, labels); };
    }
  }
  cfg.on_restore = [&](int64_t step, const std::string& path) {
    if (graph) graph->state_replaced();
    if (hand) hand->restored(step, path);  // under ringfence run the trainer logs it
  };
  TrainResult r;
  int64_t applied_samples = 0;  // by this process (a replacement counts from its join)
  const ddp::Trainer* trainer_ptr = nullptr;  // for on_step, set once it is made
  cfg.on_step = [&](int64_t s, double loss) {
    // The last batch of an epoch may be short (the sampler keeps it).
    const int64_t in_epoch = s % sampler.steps_per_epoch();
    const int64_t samples = std::min<int64_t>(opt.batch, train_set.n - in_epoch * opt.batch);
    applied_samples += samples;
    if (loss_log.is_open()) loss_log << "{\"step\":" << s << ",\"loss\":" << nlohmann::json(loss).dump() << "}\n";
    if (batch_log.is_open())
      batch_log << "{\"step\":" << s << ",\"indices\":" << nlohmann::json(sampler.global_batch(s)).dump() << "}\n";
    if (hand) {
      r.losses.push_back(static_cast<float>(loss));
      hand->step(s, loss, samples, trainer_ptr->progress().checkpoints_failed);
    }
  };

  if (reporter && w.incarnation == 0)
    log << header(opt, w, model->num_parameters(), train_set.n, total_steps) << std::flush;
  ddp::Trainer trainer(
      *model, [](const Tensor& out, std::span<const int32_t> y) { return classification_loss(out, y, Reduction::Sum); },
      train_set, sgd, std::move(cfg));
  trainer_ptr = &trainer;
  const ddp::TrainerResult tr = trainer.run();

  r.steps = tr.step + 1;
  r.final_loss = tr.final_loss;
  r.samples = applied_samples;
  r.train_seconds = tr.train_seconds;
  r.samples_per_sec = tr.train_seconds > 0 ? applied_samples / tr.train_seconds : 0.0;
  r.state_digest = tr.digest;
  r.resumed_step = tr.resumed_step;
  r.checkpoints = tr.checkpoints;
  r.checkpoints_failed = tr.checkpoints_failed;
  r.ckpt_wait_seconds = tr.ckpt_wait_seconds;
  r.world_size = tr.world;
  r.generation = tr.generation;
  r.recoveries = tr.recoveries;
  r.stopped = hand ? hand->stopped() : !tr.standby && r.steps < total_steps;
  if (loss_log.is_open()) loss_log.flush();
  if (batch_log.is_open()) batch_log.flush();
  if (tr.standby) {
    log << "== " << prog << " slot " << w.slot << ": the job ended without needing it (a spare, or a restart that arrived after the end)\n" << std::flush;
    return r;
  }
  if (graph) {
    const GraphStep::Counts c = graph->counts();
    log << "== cuda graph: " << c.captures << " captured, " << c.replays << " replayed, " << c.eager << " eager steps\n";
  }
  log << "== " << prog << " slot " << w.slot << " incarnation " << w.incarnation << ": step " << tr.step
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
