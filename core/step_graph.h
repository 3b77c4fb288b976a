#pragma once
// StepGraph — work issued on a device's stream, captured once and launched again. The one
// implementation is a CUDA graph (core/cuda_graph.h, library rf_core_cuda); code that must
// not link CUDA (models/) holds it through this interface, and a program that links
// rf_core_cuda hands it the factory (models/train_main.cpp: rf::make_cuda_graph).
#include <functional>
#include <memory>

#include "core/device.h"

namespace rf {

class StepGraph {
 public:
  virtual ~StepGraph() = default;
  // Replaces what was captured before with what work() issues on the device's stream; on
  // a failure the graph is empty and the error is rethrown.
  virtual void capture(const std::function<void()>& work) = 0;
  virtual void replay() = 0;  // enqueues what was captured; does not wait
  virtual void reset() = 0;   // empty again; frees what the graph held
  virtual bool captured() const = 0;
};

// Makes a StepGraph for `device`; throws rf::Error when it cannot (no CUDA in the build).
using StepGraphFactory = std::unique_ptr<StepGraph> (*)(Device device);

}  // namespace rf
