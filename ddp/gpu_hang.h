#pragma once
// The GPU half of --inject gpu_hang (ddp/fault_injector.h), in library rf_ddp_cuda: linked
// only by programs that compute on a GPU (train_mlp, train_cnn), which hand it to the
// fault injector once they know their device (models/train_program.cpp). In a build
// without CUDA it is a stub that throws.

namespace rf::ddp {

// Enqueues on `stream` (a cudaStream_t of CUDA device `device`) one kernel that never ends
// (it waits for a flag nobody sets, napping between looks), and returns at once: the host
// goes on, but nothing queued behind it on that stream starts, the next NCCL all-reduce
// included, until the process exits and its context goes. Binds the calling thread to
// `device` (it is the training thread's already). Throws rf::Error when the launch fails
// or the build has no CUDA.
void hang_gpu_stream(int device, void* stream);

}  // namespace rf::ddp
