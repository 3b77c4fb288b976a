#pragma once
// CudaGraph — the StepGraph (core/step_graph.h) of a GPU: work issued on its runtime's
// stream (core/cuda_runtime.h), captured once as a CUDA graph and launched again on that
// stream (library rf_core_cuda; when to capture is core/graph_policy.h's decision, the
// training step that uses it models/graph_step.h).
//
// capture(work) runs work() on the calling thread while the runtime's stream is captured
// (cudaStreamCaptureModeThreadLocal: another thread's CUDA calls neither join nor break
// it). Nothing runs on the device then; replay() launches what was captured. A graph
// reads and writes the addresses it saw during capture, so:
//   * every device allocation made during capture comes from the runtime allocator's
//     private pool (a new block: cudaMalloc, with the thread's capture mode Relaxed for
//     that call), which only this graph's captures use: a block the captured work freed
//     is never handed to other work while the graph can still write it. reset() frees
//     the pool's free blocks (cudaFree, which waits for the last replay to end); a block
//     still held (an output the caller kept) stays the pool's;
//   * buffers allocated before capture (the model's state, the step's inputs) must stay
//     alive, at the same address, as long as the graph is replayed: the caller keeps them;
//   * work() must not synchronise with the device, copy from pageable host memory, or
//     free device memory (cudaFree): capture fails with the CUDA error, capture() throws
//     rf::CudaError, and the graph is empty again.
// One graph per device at a time: the pool is the runtime's, and a graph holds it from its
// capture to its reset; another graph's capture meanwhile throws rf::Error. Not
// thread-safe; one thread issues the device's work.
// In a build without CUDA, constructing one throws rf::Error ("this build has no CUDA").
#include <functional>
#include <memory>

#include "core/device.h"
#include "core/step_graph.h"

namespace rf {

class CudaGraph final : public StepGraph {
 public:
  explicit CudaGraph(Device device);  // cuda:i; its runtime is made if it is not yet
  ~CudaGraph() override;              // reset()
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Replaces what was captured before (reset() first) with what work() issues. When work()
  // throws or the capture fails, the graph is empty and the error is rethrown.
  void capture(const std::function<void()>& work) override;
  // Launches the captured work on the runtime's stream (enqueues; does not wait).
  void replay() override;
  // Destroys the graph and hands the private pool's blocks back to the runtime's cache.
  void reset() override;
  bool captured() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A CudaGraph for `device`, as a StepGraphFactory (core/step_graph.h).
std::unique_ptr<StepGraph> make_cuda_graph(Device device);

}  // namespace rf
