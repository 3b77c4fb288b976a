// CudaGraph (core/cuda_graph.h): stream capture on the device runtime's stream, its private
// pool (core/cuda_pool.h), instantiate, launch. In rf_core_cuda when the build has CUDA;
// core/cuda_runtime_none.cpp stands in otherwise.
#include "core/cuda_graph.h"

#include <cuda_runtime.h>

#include "base/error.h"
#include "base/str.h"
#include "core/cuda_pool.h"
#include "core/device_runtime.h"
#include "kernels/cuda/check.h"

namespace rf {

struct CudaGraph::Impl {
  Device device;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool pooled = false;  // a capture opened the private pool: reset() drains it
};

CudaGraph::CudaGraph(Device device) : impl_(std::make_unique<Impl>()) {
  if (device.is_cpu()) throw InvalidInput("CudaGraph: needs a CUDA device, not the CPU");
  impl_->device = device;
  impl_->stream = static_cast<cudaStream_t>(runtime(device, "CudaGraph").stream());
}

CudaGraph::~CudaGraph() {
  try {
    reset();
  } catch (const Error&) {
    // a destructor does not throw; the device's error shows again at its next checked call
  }
}

void CudaGraph::capture(const std::function<void()>& work) {
  reset();
  const int index = impl_->device.index;
  cudaStream_t stream = static_cast<cudaStream_t>(runtime(impl_->device, "CudaGraph").stream());
  impl_->stream = stream;
  cuda_pool::open(index, this);
  impl_->pooled = true;
  cudaGraph_t graph = nullptr;
  try {
    RF_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      // Leave capture mode whatever state the capture is in, and forget what was captured.
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      throw;
    }
    RF_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cuda_pool::close(index);
    RF_CUDA_CHECK(cudaGraphInstantiate(&impl_->exec, graph, 0));
    impl_->graph = graph;
  } catch (...) {
    cuda_pool::close(index);
    if (graph && !impl_->graph) cudaGraphDestroy(graph);
    impl_->exec = nullptr;
    throw;
  }
}

void CudaGraph::replay() {
  if (!impl_->exec) throw Error("CudaGraph::replay: nothing captured");
  RF_CUDA_CHECK(cudaGraphLaunch(impl_->exec, impl_->stream));
}

void CudaGraph::reset() {
  if (impl_->exec) RF_CUDA_CHECK(cudaGraphExecDestroy(impl_->exec));
  impl_->exec = nullptr;
  if (impl_->graph) RF_CUDA_CHECK(cudaGraphDestroy(impl_->graph));
  impl_->graph = nullptr;
  // The last replay may still run on the stream: cudaFree waits for the device first.
  if (impl_->pooled) cuda_pool::drain(impl_->device.index, this);
  impl_->pooled = false;
}

std::unique_ptr<StepGraph> make_cuda_graph(Device device) { return std::make_unique<CudaGraph>(device); }
bool CudaGraph::captured() const { return impl_->exec != nullptr; }

}  // namespace rf
