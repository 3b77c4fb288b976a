#pragma once
// The test double of NCCL's non-blocking API and of the CUDA runtime (tests/nccl_double):
// what a test sees of it besides the real nccl.h and cuda_runtime.h, whose functions the
// libraries rf_fake_nccl and rf_fake_cudart define on the CPU (device memory is host
// memory; a stream is a FIFO run by a thread of its own; an NCCL "kernel" is a task on it
// that talks to the peers over Unix sockets). It checks our USE of the API, not NCCL.
//
// As NCCL 2.28.9 does: a collective on a non-blocking communicator of several ranks answers
// ncclInProgress and launches from a job thread (count 0, one rank, or a blocking
// communicator: in the call); the first collective of a communicator makes its connections
// inside that launch unless NCCL_RUNTIME_CONNECT=0 was set when it was made (then its init,
// or the shrink that made it, does; a blocking communicator never waits for them); a kernel
// that meets a dead peer leaves ncclRemoteError in the proxy, which ncclCommRevoke does not
// clear; a revocation while a launch job is pending is a use after free in NCCL, and the
// double aborts the process at the next call that would touch the freed job
// (fake_nccl_comm.h).
//
// Environment (read at every use unless said otherwise):
//   RF_FAKE_CUDA_DEVICES=N     devices per process (default 4; read once)
//   RF_FAKE_NCCL_INPROGRESS_MS=N  a launch job enqueues its kernel N ms after the call
//                              (default 0: at once)
//   RF_FAKE_NCCL_CONNECT_MS=N  how long making a communicator's connections takes
//                              (default 50), at init or inside its first collective's launch
//   NCCL_RUNTIME_CONNECT=0     NCCL's own: connections at init (read when a communicator is made)
//   RF_FAKE_NCCL_LOG=1         one line per NCCL call on stderr
//
// Test hooks, C linkage:
#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Enqueues on `s` a "kernel" that never ends until rf_fake_cuda_release_spins() (a stuck
// compute kernel: everything behind it on `s`, NCCL's kernels included, waits).
cudaError_t rf_fake_cuda_spin(cudaStream_t s);
// Ends every spin enqueued so far (later ones spin until the next release).
void rf_fake_cuda_release_spins(void);
// How many spins are running now (reached by their stream and not released).
int rf_fake_cuda_spinning(void);
// Enqueues fn(arg) on `s` (like cudaLaunchHostFunc, but fn may call the fake CUDA runtime:
// a "kernel" written in C++ for a test).
cudaError_t rf_fake_cuda_enqueue_host(cudaStream_t s, void (*fn)(void*), void* arg);
// Bit d set: this process made a CUDA context on device d (cudaSetDevice(d), or any
// allocation, stream, event, copy or NCCL communicator while d was current; cudaGetDevice
// makes none). Each rank should touch its own GPU only.
unsigned rf_fake_cuda_contexts(void);
void rf_fake_cuda_reset_contexts(void);  // for single-process unit tests
// Live device memory on `device` (cudaMalloc not yet freed, plus kFakeNcclCommBytes per
// NCCL communicator not yet aborted or destroyed), and live pinned host memory
// (cudaMallocHost / cudaHostAlloc). cudaMemGetInfo reports 16 GiB minus the first.
size_t rf_fake_cuda_live_bytes(int device);
size_t rf_fake_cuda_pinned_bytes(void);

// Live fake NCCL communicators in this process (made, not yet aborted or destroyed).
int rf_fake_nccl_live_comms(void);
// How many communicators of this process made their connections inside a collective's
// launch (NCCL_RUNTIME_CONNECT not 0 when made) rather than at init, so far.
int rf_fake_nccl_runtime_connects(void);

#ifdef __cplusplus
}  // extern "C"

// Device memory each fake NCCL communicator holds on its device while it lives (as real
// NCCL's buffers do): a communicator never torn down shows as growing device memory.
inline constexpr size_t kFakeNcclCommBytes = size_t(4) << 20;
#endif
