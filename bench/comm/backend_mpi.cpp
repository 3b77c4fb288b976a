// Open MPI's MPI_Allreduce (in place), the reference of the latency and busbw goals.
#define OMPI_SKIP_MPICXX 1  // the C API only; no C++ bindings to link
#include <mpi.h>

#include "bench/comm/backend.h"

namespace rf::bench {

namespace {

class MpiBackend : public BenchBackend {
 public:
  MpiBackend(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
  }
  ~MpiBackend() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void allreduce(float* data, size_t count, const comm::RegisteredMemory*) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  void allreduce_u64(uint64_t* data, size_t count) override {
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

 private:
  int rank_ = 0, world_ = 1;
};

}  // namespace

std::unique_ptr<BenchBackend> make_mpi_backend(int* argc, char*** argv) {
  return std::make_unique<MpiBackend>(argc, argv);
}

}  // namespace rf::bench
