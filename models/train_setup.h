#pragma once
// What train_mlp / train_cnn build from their flags for the trainer (models/train.h), by
// hand and under `ringfence run` alike: the data, the model, the loss, the optimizer's
// settings, the checkpoints' metadata, and the end of a run (test accuracy, the final
// line, --metrics).
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>

#include "ckpt/snapshot_meta.h"
#include "core/data/dataset.h"
#include "core/nn/sequential.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "models/train_options.h"

namespace rf::models {

// The training / test split: Fashion-MNIST from opt.data_dir, or with opt.synthetic = N
// one synthetic stream of N + N/5 samples split in two (the test samples are fresh draws
// of the same class patterns). Both are pure functions of the flags, so every rank loads
// the same data.
data::Dataset load_train_set(const TrainOptions& opt);
data::Dataset load_test_set(const TrainOptions& opt);

// The reference model from opt.seed (every rank gets bitwise the same initial state), with
// --init's parameters loaded over it when given, then moved to opt.device: initialised on
// the host exactly as on the CPU, so every device starts from the same values.
std::shared_ptr<nn::Sequential> build_model(const TrainOptions& opt);

// Moves every parameter of `model` to `device` in place, with a zeroed gradient there. The
// layers and named_parameters() hold handles to the same TensorImpl, so re-pointing its
// storage moves the layer's own weight. Before any optimizer or reducer takes the
// parameters (they allocate their state on the parameters' device).
void move_parameters(nn::Module& model, Device device);

// The device of the model's parameters (the CPU for a model without any).
Device model_device(const nn::Module& model);

optim::SgdOptions sgd_options(const TrainOptions& opt);

// What every checkpoint of this run records besides its step, generation and world: the
// model, the optimizer and its hyper-parameters, and the data order (batch, number of
// training samples, seed). The same by hand and under `ringfence run`, so a checkpoint
// written one way resumes the other way without a warning.
ckpt::SnapshotMeta checkpoint_meta(const TrainOptions& opt, int64_t train_samples);

// Cross-entropy over the logits: the trainer's loss is Reduction::Sum over the local
// samples (its reducer divides the reduced gradient by the global count, docs/protocol.md
// R3); evaluation sums too and divides once.
Tensor classification_loss(const Tensor& logits, std::span<const int32_t> labels, Reduction reduction);

// The end of a run: evaluates `model` on `test`, fills r.test_accuracy / r.test_loss,
// prints "== test accuracy ..." to `log` and writes --metrics when asked.
void finish_run(const TrainOptions& opt, nn::Module& model, const data::Dataset& test, TrainResult& r,
                std::ostream& log);

// Writes the --metrics JSON (keys test_accuracy, final_loss, steps, samples_per_sec,
// state_digest, plus model, device, backend, test_loss, samples, train_seconds, batch,
// threads, world_size, generation, recoveries, checkpoints, ...).
void write_metrics(const std::string& path, const TrainOptions& opt, const TrainResult& r);

// An output file (--loss-log, --metrics, ...), truncated; rf::InvalidInput names the flag.
std::ofstream open_output(const std::string& path, const char* flag);

// Fails now (rf::InvalidInput naming the flag, the path and why) when `path` cannot be
// opened for writing, so an output written only at the end (--metrics) is refused before
// training, not after it. An existing file is left exactly as it is (opened for appending,
// nothing written); a missing one is not created (its directory must exist and be
// writable), so workers checking the same path at once do not race.
void check_output_writable(const std::string& path, const char* flag);

}  // namespace rf::models
