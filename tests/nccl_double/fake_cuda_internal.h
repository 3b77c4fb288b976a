#pragma once
// Between the two halves of the double (not for tests): what the fake NCCL needs of the
// fake CUDA runtime.
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace rf_fake_cuda {

// The calling thread's current device (cudaGetDevice's answer; no context made).
int current_device();
// Makes `device` current for one of the double's own threads, as real NCCL's threads do
// with cudaSetDevice (which makes the device's context).
void bind_thread(int device);
// Enqueues `body` on `s` (null, cudaStreamLegacy or cudaStreamPerThread: the current
// device's default stream). It runs on the stream's thread once everything before it on
// the stream has ended; the stream goes on when it returns. cudaErrorInvalidResourceHandle
// for a stream that does not exist (destroyed, or never made).
cudaError_t enqueue(cudaStream_t s, std::function<void()> body);
// The device a stream belongs to; -1 when it does not exist.
int stream_device(cudaStream_t s);

// What [p, p + bytes) is: inside one cudaMalloc block (device_memory, its device), inside
// one cudaMallocHost / cudaHostAlloc block (pinned_host), or neither (pageable).
enum class MemKind { device_memory, pinned_host, pageable };
MemKind memory_kind(const void* p, size_t bytes, int* device);

// Adds `bytes` (negative: frees) to `device`'s live device memory without a block (a
// communicator's own buffers).
void account(int device, long long bytes);

}  // namespace rf_fake_cuda
