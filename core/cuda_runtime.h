#pragma once
// The CUDA devices' runtimes (core/device_runtime.h), in library rf_core_cuda. A program
// that wants a GPU links rf_core_cuda and calls register_cuda_runtime() once; afterwards
// runtime(cuda:i) is device i's runtime, made on first use:
//   * ops: the CUDA op table (kernels/cuda/table.h), every entry enqueued on the stream;
//   * memory: a caching allocator over cudaMalloc (freed blocks are kept per rounded size,
//     so after the first step nothing is allocated; blocks are reused in stream order);
//   * one stream per device (non-blocking), created with the runtime;
//   * write: the host source is copied into the runtime's pinned staging before write
//     returns, then cudaMemcpyAsync on the stream (the source may be reused at once);
//   * read: cudaMemcpyAsync + cudaStreamSynchronize (counted); read_async + record/wait:
//     a cudaEvent per Fence, cudaEventSynchronize (counted); synchronize (counted);
//   * host_staging: pinned memory (cudaMallocHost), cached like the device memory.
// Every CUDA call is checked (kernels/cuda/check.h): its text, file and line are in the
// rf::CudaError. Without a GPU, runtime(cuda:i) throws rf::Error "cuda:i: no CUDA device
// on this machine (...)"; in a build without CUDA, rf_core_cuda holds only stubs and
// runtime(cuda:i) says "this build has no CUDA".
#include <string>

namespace rf {

// Installs the provider behind runtime(cuda:i). Idempotent; does nothing in a build
// without CUDA.
void register_cuda_runtime();

// GPUs this process can use: 0 when there is none, no driver, or no CUDA in the build.
// Never throws.
int cuda_device_count();

// Why cuda_device_count() is 0 ("this build has no CUDA", or cudaGetDeviceCount's error);
// empty when there is a GPU.
std::string cuda_unavailable_reason();

// Starts (on) or ends the range a profiler started with its collection off records
// (cudaProfilerStart/Stop: Nsight Compute's --profile-from-start off): a benchmark profiles
// its timed steps, not the warm-up. Does nothing without a GPU or CUDA in the build.
void cuda_profiler_range(bool on);

}  // namespace rf
