#pragma once
// GraphPolicy — when a training step runs eagerly, is captured as a CUDA graph, or is a
// replay of the graph captured before (models/graph_step.h drives it; core/cuda_graph.h
// does the CUDA calls). Host-only and pure: no CUDA, no tensors, so it is tested on any
// machine (tests/core/test_graph_policy.cpp).
//
// A captured step bakes in more than its kernels: the addresses of every buffer it reads
// or writes, its launch shapes (the batch's shape) and the host scalars it passed (the
// learning rate, SGD's "first step" flag). GraphKey names those; the policy compares each
// step's key with the captured one:
//   * the same key: replay;
//   * another batch shape only (the short last batch of an epoch): that step runs eagerly
//     and the graph is kept, so the next full batch replays it;
//   * another generation (a recovery or restore), state layout (parameters, gradients or
//     optimizer buffers reallocated) or hyper-parameters: the graph is dropped;
//   * a key seen on `stable_steps` consecutive steps (this one included) with a warm
//     optimizer and no graph for it is captured (a capture also runs the step once).
// Before the optimizer has stepped every parameter once, every step is eager: SGD's first
// step initialises its momentum and a graph captured then would do so at every replay.
// A failed capture turns the policy off for the rest of the run (every step eager).
#include <cstdint>
#include <vector>

namespace rf {

struct GraphKey {
  std::vector<int64_t> input_shape;  // the batch's shape, rows first
  uint64_t generation = 0;           // bumped by a recovery or a restore of the state
  uint64_t state_layout = 0;         // fingerprint of the state's buffer addresses
  uint64_t hyper = 0;                // fingerprint of the host scalars the step passes (lr)
  bool optimizer_warm = false;       // every parameter's optimizer has stepped at least once

  // What a graph depends on besides the batch's shape.
  bool same_state(const GraphKey& o) const {
    return generation == o.generation && state_layout == o.state_layout && hyper == o.hyper &&
           optimizer_warm == o.optimizer_warm;
  }
  bool operator==(const GraphKey& o) const { return input_shape == o.input_shape && same_state(o); }
};

enum class GraphRun { Eager, Capture, Replay };

struct GraphDecision {
  bool drop = false;  // destroy the current graph first (and free what it holds)
  GraphRun run = GraphRun::Eager;
};

class GraphPolicy {
 public:
  enum class State {
    Off,       // not asked for: every step eager
    NoGraph,   // asked for, nothing captured (yet, or since a drop)
    Captured,  // a graph for captured_key()
    Disabled,  // a capture failed: every step eager from now on
  };

  explicit GraphPolicy(bool enabled, int stable_steps = 2)
      : state_(enabled ? State::NoGraph : State::Off), stable_steps_(stable_steps < 1 ? 1 : stable_steps) {}

  // The decision for the step with `key`; the state moves as if the decision's capture
  // succeeds (capture_failed() says otherwise).
  GraphDecision decide(const GraphKey& key) {
    if (state_ == State::Off || state_ == State::Disabled) return {};
    streak_ = (streak_ > 0 && key == last_) ? streak_ + 1 : 1;
    last_ = key;
    GraphDecision d;
    if (state_ == State::Captured && !key.same_state(captured_)) {
      d.drop = true;
      state_ = State::NoGraph;
    }
    if (!key.optimizer_warm) return d;
    if (state_ == State::Captured && key == captured_) {
      d.run = GraphRun::Replay;
      return d;
    }
    if (streak_ >= stable_steps_) {
      d.drop = d.drop || state_ == State::Captured;  // a lasting new shape: re-capture
      d.run = GraphRun::Capture;
      state_ = State::Captured;
      captured_ = key;
    }
    return d;
  }

  // The capture decide() asked for failed: the graph is gone, and no step is captured again.
  void capture_failed() { state_ = State::Disabled; }

  State state() const { return state_; }
  const GraphKey& captured_key() const { return captured_; }

 private:
  State state_;
  int stable_steps_;
  int streak_ = 0;
  GraphKey last_;
  GraphKey captured_;
};

}  // namespace rf
