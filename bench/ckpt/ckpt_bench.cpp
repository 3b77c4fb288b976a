// ckpt_bench — what asynchronous checkpoints cost a training step (the bar: checkpoints
// every 10 steps within 3 % of none). One model, one process: blocks of `block` steps
// without checkpoints and with a checkpoint every `every` steps (AsyncCheckpointer into
// --dir) alternate in ABBA order for `rounds` rounds, so drifting machine load hits both
// equally; only the same-run ratio means anything on a shared machine.
//
//   ckpt_bench [--model cnn|mlp] [--batch 128] [--threads 1] [--every 10] [--block 40]
//              [--rounds 6] [--dir DIR] [--keep 3]
// Output: per condition ms/step (total over all its blocks) and page faults/step, the
// ratio, the median of the per-round ratios, the training thread's time in save(), and
// the same for process CPU time (all threads, the writer's included).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/clock.h"
#include "bench/flags.h"
#include "ckpt/async_checkpointer.h"
#include "ckpt/checkpoint_dir.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "core/random.h"
#include "kernels/cpu/gemm.h"
#include "models/reference.h"

using namespace rf;

namespace {

long faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}

// CPU seconds of the whole process (every thread, the writer's included): on a shared,
// oversubscribed machine this is the cost that wall time only shows through noise.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_flag = "cnn", dir = "/tmp/rf_ckpt_bench";
  long batch = 128, threads = 1, every = 10, block = 40, rounds = 6, keep = 3;
  bench::Flags flags("ckpt_bench", "ckpt_bench [flags]   (training with and without background checkpoints)");
  flags.text("--model", "cnn|mlp", "the reference model (default cnn)", model_flag)
      .integer("--batch", "batch (default 128)", batch, 1)
      .integer("--threads", "GEMM threads (default 1)", threads, 1, 1024)
      .integer("--every", "checkpoint every N steps (default 10)", every, 1)
      .integer("--block", "steps per timed block (default 40)", block, 1)
      .integer("--rounds", "paired rounds (default 6)", rounds, 1)
      .text("--dir", "DIR", "checkpoint directory, emptied first (default /tmp/rf_ckpt_bench)", dir)
      .integer("--keep", "checkpoints kept (default 3)", keep, 1);
  if (const int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  if (model_flag != "cnn" && model_flag != "mlp") return flags.fail("--model: '" + model_flag + "' is not cnn or mlp");
  const auto kind = model_flag == "cnn" ? models::ModelKind::CNN : models::ModelKind::MLP;
  kernels::cpu::set_num_threads(static_cast<int>(threads));
  // Start clean, but only ever delete what a checkpointer writes: `--dir ~` removed the
  // whole directory tree before.
  {
    std::error_code ec;
    std::vector<std::filesystem::path> ours;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      const bool temp = name.size() > 5 && name[0] == '.' && name.ends_with(".tmp") &&
                        ckpt::parse_checkpoint_name(name.substr(1, name.size() - 5));
      if (!e.is_regular_file() || !(ckpt::parse_checkpoint_name(name) || temp || name == "ckpt.lock"))
        return flags.fail("--dir " + dir + " holds " + name + ", which is no checkpoint: choose an empty directory");
      ours.push_back(e.path());
    }
    for (const auto& p : ours) std::filesystem::remove(p, ec);
  }

  auto model = models::make_model(kind, 0);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  Generator g(1);
  Tensor x = Tensor::empty({batch, 1, 28, 28});
  for (float& v : x.values()) v = g.uniform(-1.0f, 2.0f);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (auto& l : labels) l = static_cast<int32_t>(g.next_u64() % 10);

  ckpt::AsyncCheckpointer checkpointer({.dir = dir, .keep = keep}, nullptr);
  ckpt::SnapshotMeta meta{.model = models::model_name(kind), .optimizer = "sgd", .optimizer_hparams = "{}"};
  int64_t step = 0;
  double save_seconds = 0;
  auto run_block = [&](bool with_ckpt) {
    for (long i = 0; i < block; ++i, ++step) {
      sgd.zero_grad();
      Tensor loss = cross_entropy((*model)(x), labels);
      loss.backward();
      sgd.step();
      if (with_ckpt && (step + 1) % every == 0) {
        const TimePoint t0 = Clock::now();
        meta.step = step;
        checkpointer.save(*model, sgd, meta);
        save_seconds += seconds_since(t0);
      }
    }
  };
  // Warm-up of both paths: allocator, checkpoint buffers, the directory.
  run_block(false);
  run_block(true);
  checkpointer.flush();

  double sec[2] = {0, 0}, cpu[2] = {0, 0};
  long flt[2] = {0, 0};
  std::vector<double> round_ratios;
  for (long r = 0; r < rounds; ++r) {
    double round_sec[2] = {0, 0};
    // ABBA: none, ckpt, ckpt, none — then the next round starts with ckpt.
    const bool order[4] = {r % 2 == 1, r % 2 == 0, r % 2 == 0, r % 2 == 1};
    for (bool with : order) {
      // Align each block to the checkpoint grid, so every ckpt block saves block/every times.
      step = (step + every - 1) / every * every;
      const long f0 = faults();
      const double c0 = cpu_seconds();
      const TimePoint t0 = Clock::now();
      run_block(with);
      // The last write of a ckpt block is finished inside its timing (conservative: its
      // disk latency counts fully), so no block pays for another's checkpoints.
      if (with) checkpointer.flush();
      const double s = seconds_since(t0);
      cpu[with] += cpu_seconds() - c0;
      sec[with] += s;
      round_sec[with] += s;
      flt[with] += faults() - f0;
    }
    round_ratios.push_back(round_sec[1] / round_sec[0]);
  }
  std::string rounds_text;
  for (double q : round_ratios) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %.3f", q);
    rounds_text += buf;
  }
  checkpointer.flush();
  std::sort(round_ratios.begin(), round_ratios.end());
  const double n_steps = 2.0 * static_cast<double>(block * rounds);  // per condition
  const double ms_none = 1000.0 * sec[0] / n_steps, ms_ckpt = 1000.0 * sec[1] / n_steps;
  std::printf("ckpt_bench %s batch %ld threads %ld: %ld rounds x 2 blocks x %ld steps per condition, "
              "checkpoint every %ld steps into %s\n",
              model_flag.c_str(), batch, threads, rounds, block, every, dir.c_str());
  const double cpu_none = 1000.0 * cpu[0] / n_steps, cpu_ckpt = 1000.0 * cpu[1] / n_steps;
  std::printf("  no checkpoints:      %.3f ms/step  %.3f CPU ms/step  %.2f page faults/step\n", ms_none, cpu_none,
              flt[0] / n_steps);
  std::printf("  every %3ld steps:     %.3f ms/step  %.3f CPU ms/step  %.2f page faults/step  (%lld checkpoints, "
              "%.3f ms in save() each, %.3f s waiting on the writer)\n",
              every, ms_ckpt, cpu_ckpt, flt[1] / n_steps, static_cast<long long>(checkpointer.saves()),
              1000.0 * save_seconds / static_cast<double>(checkpointer.saves()), checkpointer.wait_seconds());
  std::printf("  per-round step time ratios (ckpt / none):%s\n", rounds_text.c_str());
  std::printf("  step time ratio %.4f (%+.2f %%), median of per-round ratios %.4f; CPU time ratio %.4f (%+.2f %%)\n",
              ms_ckpt / ms_none, 100.0 * (ms_ckpt / ms_none - 1.0), round_ratios[round_ratios.size() / 2],
              cpu_ckpt / cpu_none, 100.0 * (cpu_ckpt / cpu_none - 1.0));
  return 0;
}
