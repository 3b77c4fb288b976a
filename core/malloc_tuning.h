#pragma once
// tune_malloc_for_training() — an explicit, process-wide opt-in for training programs.
//
// Why: on these machines the first touch of a 4 KiB page costs ~13 us. Our own tensors
// come from CachingAllocator and are reused, but memory we do not allocate ourselves
// churns too: Eigen's GEMM mallocs and frees its packing buffers (hundreds of KB) on
// every call, and glibc hands the freed top of the heap back to the kernel (trim) or
// unmaps large chunks, so the next call faults the same pages again — measured ~170
// faults (2 ms) per MLP step. After this call freed memory stays mapped: the process's
// footprint becomes its peak, which is what a training loop wants anyway.
//
// It changes glibc's malloc settings for the WHOLE process (mallopt), so a library never
// calls it behind the caller's back: a program's main() calls it once, before training.
// Idempotent; safe to call from several places. Returns false if glibc refused a setting.
namespace rf {

bool tune_malloc_for_training();

}  // namespace rf
