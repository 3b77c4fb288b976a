#pragma once
// GraphStep — the whole training step of train_mlp / train_cnn by hand, as the trainer's
// local step (ddp::TrainerConfig::local_step: one rank, no fault tolerance; models/train.h):
// zero the gradients, forward, the cross-entropy SUM over the batch, backward, the
// gradients divided by the batch's size, SGD — the trainer's own step at W = 1 (whose
// reducer divides the summed gradients by the global count), operation for operation, so
// the same bits. With --cuda-graph on a GPU the step is captured as a CUDA graph
// (core/step_graph.h) and replayed; when, is core/graph_policy.h's decision:
// eager for the optimizer's first step and for a batch of another shape (the short last
// batch of an epoch), captured once a shape is stable, replayed while nothing the graph
// baked in changed, dropped when the state's buffers move, the learning rate changes or
// the state is replaced (state_replaced()).
//
// A graph reads its inputs from buffers of its own: each replay copies the batch (host),
// its labels and the batch's size (the divisor) into them first (DeviceRuntime::write,
// ordered on the stream), then launches the graph;
// the loss stays on the device in the graph's own output, read by the caller after the
// step (the one synchronisation of the step, as without the graph). The optimizer's step
// counters advance on the host at each replay (SGD::count_replayed_step). The arithmetic
// is the eager step's, kernel for kernel: a run with the graph ends with the same bits.
// A capture that fails (CUDA refuses something the step does) is logged once and the run
// goes on eagerly, with the optimizer's counters as they were.
#include <cstdint>
#include <memory>
#include <span>

#include "core/graph_policy.h"
#include "core/nn/module.h"
#include "core/optim/sgd.h"
#include "core/step_graph.h"
#include "core/tensor.h"

namespace rf::models {

class GraphStep {
 public:
  // make_graph: null for an eager step every time (no --cuda-graph).
  // classes: the labels' range [0, classes), checked on the host before a replay's copy.
  GraphStep(nn::Module& model, optim::SGD& sgd, Device device, int classes, StepGraphFactory make_graph);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  // One step on the batch x (host memory, [B, C, H, W]) with its labels. Returns the loss
  // summed over the batch, on the device; read it before the next run() (a replay
  // overwrites it).
  Tensor run(const Tensor& x, std::span<const int32_t> labels);
  // The state was replaced in place (a restore): the graph is not replayed again.
  void state_replaced() { ++generation_; }

  struct Counts {
    int64_t eager = 0, captures = 0, replays = 0;
  };
  Counts counts() const { return counts_; }

 private:
  GraphKey key_of(const Tensor& x) const;
  Tensor eager(const Tensor& x, std::span<const int32_t> labels);
  void write_inputs(const Tensor& x, std::span<const int32_t> labels);
  void divide_gradients();  // every gradient by *divisor_, on the device
  void drop();

  nn::Module& model_;
  optim::SGD& sgd_;
  Device device_;
  int classes_;
  StepGraphFactory make_graph_;
  GraphPolicy policy_;
  uint64_t generation_ = 0;
  std::unique_ptr<StepGraph> graph_;
  Tensor in_x_;                           // the graph's input batch (device)
  std::shared_ptr<Storage> in_labels_;    // its labels (device, int32)
  std::shared_ptr<Storage> divisor_;      // the batch's size (device, one float)
  Tensor loss_;                           // its output (device)
  Counts counts_;
};

}  // namespace rf::models
