#pragma once
// The private pool of cuda:index's allocator (core/cuda_runtime.cpp), for CudaGraph
// (core/cuda_graph.h) only: while open, the opening thread's device allocations come from
// the pool, and a pool block released goes back to the pool, never to the shared cache.
// Each function makes the device's runtime if it is not yet, and throws rf::Error without one.
namespace rf::cuda_pool {

// owner: the graph capturing; the pool is its own from then until its drain. Throws
// rf::Error when another owner holds the pool, or a capture has it open already.
void open(int index, const void* owner);
void close(int index);
// cudaFree of the pool's free blocks (waits for the device), and the pool has no owner
// again; blocks still held stay the pool's. Does nothing unless `owner` holds the pool.
void drain(int index, const void* owner);

}  // namespace rf::cuda_pool
