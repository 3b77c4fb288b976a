#pragma once
// The private pool of cuda:index's allocator (core/cuda_runtime.cpp), for CudaGraph
// (core/cuda_graph.h) only: while open, the opening thread's device allocations come from
// the pool, and a pool block released goes back to the pool, never to the shared cache.
// Each function makes the device's runtime if it is not yet, and throws rf::Error without one.
namespace rf::cuda_pool {

void open(int index);   // throws rf::Error when it is open already (a capture in progress)
void close(int index);
void drain(int index);  // cudaFree of the pool's free blocks (waits for the device)

}  // namespace rf::cuda_pool
