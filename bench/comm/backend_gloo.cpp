// Gloo's ring all-reduce over TCP on loopback, set up the way PyTorch's ProcessGroupGloo
// does: a FileStore rendezvous, a full mesh, gloo::allreduce with the ring algorithm.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench/comm/backend.h"
#include "comm/bootstrap/local_launcher.h"

namespace rf::bench {

namespace {

class GlooBackend : public BenchBackend {
 public:
  GlooBackend() : env_(comm::rank_env_from_environment()) {
    gloo::transport::tcp::attr attr("127.0.0.1");
    device_ = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(env_.store_dir);
    context_ = std::make_shared<gloo::rendezvous::Context>(env_.rank, env_.world);
    context_->connectFullMesh(store, device_);
  }
  int rank() const override { return env_.rank; }
  int world() const override { return env_.world; }
  void allreduce(float* data, size_t count, const comm::RegisteredMemory*) override { run(data, count); }
  void allreduce_u64(uint64_t* data, size_t count) override { run(data, count); }
  void barrier() override {
    gloo::BarrierOptions o(context_);
    gloo::barrier(o);
  }

 private:
  template <typename T>
  void run(T* data, size_t count) {
    gloo::AllreduceOptions o(context_);
    o.setOutput(data, count);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>));
    o.setTag(tag_++);
    gloo::allreduce(o);
  }
  comm::RankEnv env_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  uint32_t tag_ = 0;
};

}  // namespace

std::unique_ptr<BenchBackend> make_gloo_backend() { return std::make_unique<GlooBackend>(); }

}  // namespace rf::bench
