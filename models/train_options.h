#pragma once
// What train_mlp / train_cnn train with (their flags, models/train_flags.h) and what a run
// gives back. One training loop takes them, models/train.h's (ddp::Trainer: by hand one
// rank without fault tolerance, under `ringfence run` data-parallel and resilient).
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/step_graph.h"
#include "models/reference.h"

namespace rf::models {

struct TrainOptions {
  ModelKind model = ModelKind::MLP;
  int64_t epochs = 1;
  int64_t batch = 128;       // global batch
  float lr = 0.05f;
  float momentum = 0.9f;
  uint64_t seed = 0;         // model init and batch order
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int threads = 1;
  int64_t log_interval = 50; // steps; 0 = quiet
  int64_t max_steps = -1;    // stop after this many steps (-1: all epochs)
  int64_t synthetic = 0;     // > 0: train on this many synthetic samples instead
  std::string init_file;     // safetensors with PyTorch names
  std::string metrics_file;  // JSON summary
  std::string loss_log;      // JSON lines {"step":s,"loss":x}
  std::string batch_log;     // JSON lines {"step":s,"indices":[...]}
  // Checkpoints (ckpt/, docs/ckpt.md). With ckpt_dir set, the state is checkpointed every
  // ckpt_every steps (0: only at the end) and at the end of training, keeping ckpt_keep.
  std::string ckpt_dir;
  int64_t ckpt_every = 0;
  int64_t ckpt_keep = 3;
  // Where a final checkpoint that does not fit next to the older ones is staged first
  // (ckpt/staging.h); "": never.
  std::string ckpt_staging = "/var/tmp";
  bool resume = false;       // continue from the newest valid checkpoint in ckpt_dir
  std::string resume_from;   // continue from this file (an error if it is not valid)
  // Test hook: the write of the checkpoint of this step stops half-way (temp file half
  // written and synced), prints "ckpt: test hook: paused ..." to stderr and waits to be
  // killed. -1: off.
  int64_t ckpt_test_pause_step = -1;
  // Graceful stop, by hand: when this becomes true (the programs set it on SIGTERM /
  // SIGINT), training stops after the step in flight, checkpoints it (with ckpt_dir),
  // evaluates and returns normally; --resume continues from there. Null: never. (Under
  // `ringfence run` the launcher owns the stop: R5.)
  const std::atomic<bool>* stop_requested = nullptr;
  // Only under `ringfence run`: all ranks compare state digests
  // every N steps (0: off); every worker appends its state changes to this JSON-lines
  // file (one line per write, tagged with slot and incarnation; "" = none).
  int64_t verify_every = 0;
  std::string audit_log;
  // comm's flight recorder (the last collectives of the failed generation) goes to
  // flight_dir/flight-slot<S>-inc<I>.jsonl on a failure instead of stderr ("" = stderr).
  std::string flight_dir;
  // Where the model, its gradients, the optimizer state and each batch live (--device). A
  // bare "--device cuda" is any_gpu: cuda:0 by hand, the local rank's GPU under ringfence
  // run (models/device_choice.h); the program resolves it before training.
  Device device = Device::CPU;
  bool any_gpu = false;
  // How gradients are all-reduced under ringfence run (--backend); one process has none.
  comm::Backend backend = comm::Backend::Ucx;
  // Exact mode (docs/exact.md): the global batch cut into micro_shards pieces, each
  // computed alone, their gradients summed exactly: the same bits for any W (by hand too).
  bool exact = false;
  int micro_shards = 8;
  // By hand on a GPU (--cuda-graph): the step captured as a CUDA graph and replayed
  // (models/graph_step.h, the trainer's local step); make_graph is the program's factory
  // (rf::make_cuda_graph, set by its main(); null: every step eager).
  bool cuda_graph = false;
  StepGraphFactory make_graph = nullptr;
};

struct TrainResult {
  double test_accuracy = 0.0;  // fraction in [0, 1]
  double test_loss = 0.0;
  double final_loss = 0.0;     // loss of the last step
  int64_t steps = 0;           // steps applied in total (resumed ones included)
  bool stopped = false;        // a graceful stop ended training early
  int64_t samples = 0;
  double train_seconds = 0.0;  // the training loop only (no data loading, no evaluation)
  double samples_per_sec = 0.0;
  std::string state_digest;    // parameters + optimizer state, 32 hex
  int64_t resumed_step = -1;   // the checkpoint's step when resumed (training began after it)
  int64_t checkpoints = 0;     // checkpoints saved by this process
  int64_t checkpoints_failed = 0;  // of them, not written (a full or failing disk: warnings)
  double ckpt_wait_seconds = 0;  // training time spent waiting for the checkpoint writer
  std::vector<float> losses;   // per step applied by this process (by hand only)
  // Data-parallel runs (ringfence run): the world size and generation at the end, and
  // the generations this worker joined after its first (recoveries it took part in).
  int world_size = 1;
  uint64_t generation = 0;
  int64_t recoveries = 0;
};

}  // namespace rf::models
