#include "base/log.h"
#include "models/train_loop.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <iostream>
#include <memory>
#include <ostream>
#include <sstream>

#include "base/clock.h"
#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"
#include "ckpt/async_checkpointer.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/resume.h"
#include "core/data/data.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "core/state_digest.h"
#include "models/graph_step.h"
#include "models/train_setup.h"

namespace rf::models {
namespace {

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

// Restores the state per --resume / --resume-from; returns the step to start at. With
// --ckpt-dir, the directory must belong to this lineage: a fresh start refuses a directory
// that already holds checkpoints (they would be mixed with and pruned by this run).
int64_t restore_for_resume(const TrainOptions& opt, nn::Module& model, optim::SGD& sgd,
                           const ckpt::SnapshotMeta& ours, ckpt::AsyncCheckpointer* checkpointer, TrainResult& r,
                           std::ostream& log) {
  const ckpt::RestoreExpect expect{.model = ours.model, .optimizer = ours.optimizer, .gradient_sum = ours.gradient_sum};
  std::optional<ckpt::ResumePoint> point;
  if (!opt.resume_from.empty()) {
    point = ckpt::resume_from_file(opt.resume_from, model, sgd, expect);
  } else if (opt.resume) {
    std::ostringstream warn;
    point = ckpt::resume_newest(opt.ckpt_dir, model, sgd, expect, warn);
    std::string line;
    for (std::istringstream lines(warn.str()); std::getline(lines, line);) rf::log::warn("train", line);
  }
  const int64_t from = point ? point->meta.step : -1;
  if (!opt.ckpt_dir.empty()) {
    const auto existing = ckpt::list_checkpoints(opt.ckpt_dir);
    // After --resume every file newer than `from` failed validation (else it would have
    // been chosen); this run's first checkpoint prunes them. Otherwise newer files may be
    // valid work of another run: refuse rather than delete it.
    if (!opt.resume && !existing.empty() && existing.front().step > from) {
      throw InvalidInput(str("--ckpt-dir ", opt.ckpt_dir, " already holds checkpoints (newest ",
                             existing.front().path, ")", point ? " newer than the one resumed" : "",
                             "; pass --resume to continue from them, or choose another directory"));
    }
  }
  if (!point) return 0;
  for (const auto& w : ckpt::resume_differences(*point, ours)) rf::log::warn("train", w);
  // Valid (restore_state checked it all): the file a failed checkpoint leaves newest.
  if (checkpointer && !opt.ckpt_dir.empty() && opt.resume_from.empty()) checkpointer->set_newest_valid(from, point->path);
  log << "== resumed from " << point->path << " (step " << from << "), continuing at step " << from + 1 << "\n";
  r.resumed_step = from;
  return from + 1;
}

}  // namespace

TrainResult train(const TrainOptions& opt, std::ostream& log) {
  if (opt.verify_every > 0) throw InvalidInput("--verify-every: only under ringfence run (one process has no replicas)");
  if (!opt.audit_log.empty()) throw InvalidInput("--audit-log: only under ringfence run");
  if (!opt.flight_dir.empty()) throw InvalidInput("--flight-dir: only under ringfence run");
  // --metrics is written at the end: a path that cannot be written fails now, not then.
  if (!opt.metrics_file.empty()) check_output_writable(opt.metrics_file, "--metrics");
  // GEMM threads are a process-wide setting: the program's main() makes it (--threads).
  const data::Dataset train_set = load_train_set(opt);
  const data::Dataset test_set = load_test_set(opt);

  auto model = build_model(opt);
  optim::SGD sgd(model->named_parameters(), sgd_options(opt));
  data::Sampler sampler(train_set.n, opt.batch, opt.seed);

  TrainResult r;
  ckpt::SnapshotMeta meta = checkpoint_meta(opt, train_set.n);
  RF_ENFORCE(meta.optimizer == sgd.kind());

  std::ofstream loss_log, batch_log;
  if (!opt.loss_log.empty()) loss_log = open_output(opt.loss_log, "--loss-log");
  if (!opt.batch_log.empty()) batch_log = open_output(opt.batch_log, "--batch-log");

  int64_t total_steps = opt.epochs * sampler.steps_per_epoch();
  if (opt.max_steps >= 0) total_steps = std::min(total_steps, opt.max_steps);
  log << "== train_" << model_name(opt.model) << ": " << model->num_parameters()
      << " parameters, " << train_set.n << " training samples, batch " << opt.batch << ", "
      << total_steps << " steps, " << opt.threads << " thread(s)"
      << (opt.device.is_cpu() ? std::string() : ", on " + device_name(opt.device)) << "\n";
  // The lock first: two runs must never share a checkpoint directory (one writer per job).
  std::unique_ptr<ckpt::AsyncCheckpointer> checkpointer;
  if (!opt.ckpt_dir.empty()) {
    checkpointer = std::make_unique<ckpt::AsyncCheckpointer>(
        ckpt::CheckpointerOptions{.dir = opt.ckpt_dir, .keep = opt.ckpt_keep, .staging_dir = opt.ckpt_staging,
                                  .partial_write_hook = pause_in_write_hook(opt.ckpt_test_pause_step)},
        &log);
  }
  const int64_t first_step = restore_for_resume(opt, *model, sgd, meta, checkpointer.get(), r, log);
  if (first_step > 0 && first_step >= total_steps)
    rf::log::warn("train", "the checkpoint holds step ", first_step - 1, ", this run has ", total_steps,
              " steps: nothing left to train");

  GraphStep stepper(*model, sgd, opt.device, kReferenceClasses, opt.cuda_graph ? opt.make_graph : nullptr);
  std::vector<int32_t> labels;
  const TimePoint t0 = Clock::now();
  TimePoint window_t = t0;
  int64_t window_samples = 0;
  int64_t saved_step = first_step - 1;  // the resumed state is on disk already
  int64_t end_step = total_steps;       // one past the last step applied
  for (int64_t step = first_step; step < end_step; ++step) {
    const std::vector<int64_t> idx = sampler.global_batch(step);
    const int64_t b = static_cast<int64_t>(idx.size());
    // Tensors come from the caching allocators: the same sizes every step, no page faults
    // and, on a device, no allocation after the first step. The batch is gathered on the
    // host and copied to the model's device (write returns once its source is staged).
    Tensor x = Tensor::empty({b, train_set.c, train_set.h, train_set.w});
    labels.resize(b);
    data::gather_batch(train_set, idx, x.data(), labels.data());
    // zero_grad, forward, loss, backward, SGD: eagerly, or as a CUDA graph (--cuda-graph).
    Tensor loss = stepper.run(x, labels);
    // The loss reaches the host once the whole step is issued: on a device, reading it
    // earlier would make backward wait for the forward (every step's loss is recorded).
    const float loss_value = loss.item();
    const bool stop = opt.stop_requested && opt.stop_requested->load(std::memory_order_relaxed);
    // Step boundary: S is the state after `step` (R1). save() copies it and returns. The
    // last step's (or the stop's) is the final checkpoint, whichever path saves it.
    if (checkpointer && opt.ckpt_every > 0 && (step + 1) % opt.ckpt_every == 0) {
      meta.step = step;
      const bool last = stop || step + 1 == end_step;
      checkpointer->save(*model, sgd, meta, {}, last ? ckpt::SaveKind::Final : ckpt::SaveKind::Periodic);
      saved_step = step;
    }
    if (checkpointer) checkpointer->report();

    r.final_loss = loss_value;
    r.losses.push_back(loss_value);
    r.samples += b;
    window_samples += b;
    if (loss_log.is_open()) loss_log << "{\"step\":" << step << ",\"loss\":" << nlohmann::json(loss_value).dump() << "}\n";
    if (batch_log.is_open()) batch_log << "{\"step\":" << step << ",\"indices\":" << nlohmann::json(idx).dump() << "}\n";
    if (stop) {
      end_step = step + 1;  // the loop ends after this step; the final checkpoint below holds it
      r.stopped = true;
      log << "== stop requested: stopping after step " << step << "\n";
    }
    if (opt.log_interval > 0 && ((step + 1) % opt.log_interval == 0 || step + 1 == end_step)) {
      const double dt = seconds_since(window_t);
      char line[160];
      std::snprintf(line, sizeof line, "step %6lld/%lld  epoch %lld  loss %.4f  %.0f samples/s",
                    static_cast<long long>(step + 1), static_cast<long long>(total_steps),
                    static_cast<long long>(step / sampler.steps_per_epoch()), loss_value,
                    dt > 0 ? window_samples / dt : 0.0);
      const int64_t failed = checkpointer ? checkpointer->failures() : 0;
      log << line << (failed ? str("  ckpt failed ", failed) : std::string()) << "\n" << std::flush;
      window_t = Clock::now();
      window_samples = 0;
    }
  }
  // A periodic checkpoint that failed was a warning; the final state not on disk is an
  // error, reported after the run's results (they are the only copy of it now).
  std::string not_on_disk;
  if (checkpointer) {
    if (end_step - 1 > saved_step) {  // the final state, unless it was just saved
      meta.step = end_step - 1;
      checkpointer->save(*model, sgd, meta, {}, ckpt::SaveKind::Final);
    }
    try {
      checkpointer->flush();
    } catch (const ckpt::CheckpointWriteFailed& e) {
      not_on_disk = e.what();
    }
    r.checkpoints = checkpointer->saves();
    r.checkpoints_failed = checkpointer->failures();
    r.ckpt_wait_seconds = checkpointer->wait_seconds();
  }
  r.train_seconds = seconds_since(t0);
  if (opt.cuda_graph) {
    const GraphStep::Counts c = stepper.counts();
    log << "== cuda graph: " << c.captures << " captured, " << c.replays << " replayed, " << c.eager
        << " eager steps\n";
  }
  r.steps = std::max(end_step, first_step);
  r.samples_per_sec = r.train_seconds > 0 ? r.samples / r.train_seconds : 0.0;
  r.state_digest = state_digest(*model, sgd);

  finish_run(opt, *model, test_set, r, log);
  if (!not_on_disk.empty())
    throw ckpt::CheckpointWriteFailed(
        str("the final state (step ", end_step - 1, ", state ", r.state_digest, ") is not in the checkpoint directory: ", not_on_disk));
  return r;
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

}  // namespace rf::models
