#pragma once
// The fake CUDA runtime's own shared state, private to fake_cudart*.cpp.
#include <cuda_runtime.h>

namespace rf_fake_cuda::detail {

inline thread_local int tl_device = 0;            // the current device (0 for a new thread)
inline thread_local bool tl_in_callback = false;  // inside a cudaLaunchHostFunc callback
inline thread_local cudaError_t tl_last_error = cudaSuccess;

int device_count();
void make_context(int device);
// Records `e` as the thread's last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t e, const char* call);
// The common entry of a call that needs the current device's context: refuses from inside
// a host callback (as CUDA does: cudaErrorNotPermitted), else makes the context.
cudaError_t enter(const char* call);
// Waits until every stream of `device` has run what was enqueued on it before the call
// (cudaDeviceSynchronize; cudaFree and cudaFreeHost do it implicitly, as CUDA does).
void sync_device(int device);

}  // namespace rf_fake_cuda::detail
