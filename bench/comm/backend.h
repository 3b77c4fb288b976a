#pragma once
// The backends comm_bench compares: ours (UCX ring), and — when their Debian packages are
// found at build time — Gloo's ring over TCP and Open MPI's MPI_Allreduce.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/types.h"

namespace rf::bench {

class BenchBackend {
 public:
  virtual ~BenchBackend() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Sum, in place. `registered`: the registered memory data lies in (comm/types.h), or null;
  // only our backend uses it.
  virtual void allreduce(float* data, size_t count, const comm::RegisteredMemory* registered) = 0;
  virtual void allreduce_u64(uint64_t* data, size_t count) = 0;
  virtual void barrier() = 0;
};

struct BenchTuning {  // knobs of our backend (the others have their own defaults)
  size_t chunk_bytes = 0;      // 0: UcxOptions' default
  int flows = 0;
  long long small_bytes = -1;  // -1: default switch point
  long long idle_spins = -1, idle_yields = -1;
  long long single_copy_bytes = -1;  // -1: default; 0: single-copy path off
  long long single_copy_max_bytes = -1;  // -1: default (auto); cap on the collective's size
  bool unregistered = false;  // plain memory instead of registered memory (no zero-copy path)
  bool no_shm = false;        // the shared-memory path off (slots and zero-copy)
  long long shm_slot_bytes = -1;  // -1: default
};

std::unique_ptr<BenchBackend> make_ucx_backend(const BenchTuning& t);
#ifdef RF_BENCH_HAVE_GLOO
std::unique_ptr<BenchBackend> make_gloo_backend();
#endif
#ifdef RF_BENCH_HAVE_MPI
std::unique_ptr<BenchBackend> make_mpi_backend(int* argc, char*** argv);
#endif

}  // namespace rf::bench
