// rf_core_cuda in a build without CUDA: the same functions, with nothing to install
// (core/cuda_runtime.h). runtime(cuda:i) keeps saying "this build has no CUDA", and a
// CudaGraph (core/cuda_graph.h) cannot be made.
#include "core/cuda_runtime.h"

#include "base/error.h"
#include "base/str.h"
#include "core/cuda_graph.h"

namespace rf {

void register_cuda_runtime() {}
int cuda_device_count() { return 0; }
void cuda_profiler_range(bool) {}
std::string cuda_unavailable_reason() { return "this build has no CUDA (no nvcc was found when it was configured)"; }

struct CudaGraph::Impl {};
CudaGraph::CudaGraph(Device) { throw Error(str("CudaGraph: ", cuda_unavailable_reason())); }
CudaGraph::~CudaGraph() = default;
void CudaGraph::capture(const std::function<void()>&) {}
void CudaGraph::replay() {}
void CudaGraph::reset() {}
std::unique_ptr<StepGraph> make_cuda_graph(Device device) { return std::make_unique<CudaGraph>(device); }
bool CudaGraph::captured() const { return false; }

}  // namespace rf
