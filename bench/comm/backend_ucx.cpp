#include "bench/comm/backend.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/tag.h"
#include "comm/ucx/ucx_communicator.h"

namespace rf::bench {

namespace {

class UcxBackend : public BenchBackend {
 public:
  explicit UcxBackend(const BenchTuning& t) : env_(comm::rank_env_from_environment()), store_(env_.store_dir) {
    comm::UcxOptions o;
    if (t.chunk_bytes) o.chunk_bytes = t.chunk_bytes;
    if (t.flows) o.flows = t.flows;
    if (t.idle_spins >= 0) o.idle_spins = static_cast<int>(t.idle_spins);
    if (t.idle_yields >= 0) o.idle_yields = static_cast<unsigned>(t.idle_yields);
    if (t.small_bytes >= 0) o.small_allreduce_bytes = t.small_bytes;
    if (t.single_copy_bytes == 0) o.single_copy = false;
    else if (t.single_copy_bytes > 0) o.single_copy_bytes = static_cast<size_t>(t.single_copy_bytes);
    if (t.single_copy_max_bytes >= 0) o.single_copy_max_bytes = t.single_copy_max_bytes;
    if (t.no_shm) o.shm = false;
    if (t.shm_slot_bytes >= 0) o.shm_slot_bytes = static_cast<size_t>(t.shm_slot_bytes);
    comm_ = std::make_unique<comm::UcxCommunicator>(comm::UcxContext::create(), store_, env_.rank, env_.world, 0, o);
  }
  int rank() const override { return env_.rank; }
  int world() const override { return env_.world; }
  void allreduce(float* data, size_t count, const comm::RegisteredMemory* registered) override {
    comm::Buffer b{data, count, comm::DType::f32};
    b.registered = registered;
    comm_->allreduce(b, next());
  }
  void allreduce_u64(uint64_t* data, size_t count) override {
    comm_->allreduce(comm::Buffer{data, count, comm::DType::u64}, next());
  }
  void barrier() override { comm_->barrier(next()); }

 private:
  comm::OpId next() { return comm::OpId{step_++ % (comm::StepTag::kMaxStep + 1), 0}; }
  comm::RankEnv env_;
  comm::FileStore store_;
  std::unique_ptr<comm::UcxCommunicator> comm_;
  uint64_t step_ = 0;
};

}  // namespace

std::unique_ptr<BenchBackend> make_ucx_backend(const BenchTuning& t) { return std::make_unique<UcxBackend>(t); }

}  // namespace rf::bench
