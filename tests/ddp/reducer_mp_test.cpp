// reducer_mp_test — the Reducer on real processes (UCX on loopback, FileStore): W ranks
// train the test MLP for some steps on their slices of each global batch (R3), then
//   * every rank's parameters are bitwise identical (R4),
//   * and equal, to float tolerance, to a single process training on the whole global
//     batch with the mean loss (the reducer divides by the GLOBAL count).
//
//   reducer_mp_test W BATCH CAP_BYTES overlap|no-overlap     (the launcher)
// Ranks run the same binary with RF_RANK/RF_WORLD/RF_STORE set (comm/local_launcher.h)
// and write their parameters to RF_STORE/params-<rank>.bin.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/str.h"
#include "comm/file_store.h"
#include "comm/local_launcher.h"
#include "comm/ucx/ucx_communicator.h"
#include "core/data/data.h"
#include "core/optim/sgd.h"
#include "ddp/reducer.h"
#include "test_model.h"

using namespace rf;

namespace {

constexpr int64_t kSteps = 12;
constexpr int64_t kSamples = 512;

optim::SgdOptions sgd_options() {
  optim::SgdOptions o;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  return o;
}

std::vector<float> flat_params(const nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) out.insert(out.end(), p.values().begin(), p.values().end());
  return out;
}

int run_rank(int64_t batch, size_t cap, bool overlap) {
  const comm::RankEnv env = comm::rank_env_from_environment();
  comm::FileStore store(env.store_dir);
  auto ctx = comm::UcxContext::create();
  comm::UcxCommunicator c(ctx, store, env.rank, env.world, 1);
  auto model = ddp::testing::make_test_mlp(5, 48);
  optim::SGD sgd(model->named_parameters(), sgd_options());
  ddp::Reducer red(model->named_parameters(), {.bucket_cap_bytes = cap, .overlap = overlap});
  const data::Dataset ds = ddp::testing::make_test_data(kSamples, 9);
  data::Sampler sampler(ds.n, batch, 3);
  for (int64_t s = 0; s < kSteps; ++s) {
    const auto idx = sampler.local_batch(s, env.rank, env.world);
    const int64_t b = static_cast<int64_t>(idx.size());
    red.begin_step(c, static_cast<uint64_t>(s), {.samples = b});
    if (b > 0) {
      Tensor x = Tensor::empty({b, 1, 8, 8});
      std::vector<int32_t> y(static_cast<size_t>(b));
      data::gather_batch(ds, idx, x.data(), y.data());
      Tensor loss = ddp::testing::sum_loss((*model)(x), y);
      red.set_local_loss(loss.item());
      loss.backward();
    }
    const ddp::ControlBlock sum = red.finish();
    if (sum.samples != static_cast<int64_t>(sampler.global_batch(s).size())) {
      std::fprintf(stderr, "rank %d: step %lld global count %lld\n", env.rank, static_cast<long long>(s),
                   static_cast<long long>(sum.samples));
      return 1;
    }
    sgd.step();
  }
  const std::vector<float> p = flat_params(*model);
  std::ofstream f(env.store_dir + "/params-" + std::to_string(env.rank) + ".bin", std::ios::binary);
  f.write(reinterpret_cast<const char*>(p.data()), static_cast<std::streamsize>(sizeof(float) * p.size()));
  return f ? 0 : 1;
}

std::vector<float> single_process(int64_t batch) {
  auto model = ddp::testing::make_test_mlp(5, 48);
  optim::SGD sgd(model->named_parameters(), sgd_options());
  const data::Dataset ds = ddp::testing::make_test_data(kSamples, 9);
  data::Sampler sampler(ds.n, batch, 3);
  for (int64_t s = 0; s < kSteps; ++s) {
    const auto idx = sampler.global_batch(s);
    const int64_t b = static_cast<int64_t>(idx.size());
    Tensor x = Tensor::empty({b, 1, 8, 8});
    std::vector<int32_t> y(static_cast<size_t>(b));
    data::gather_batch(ds, idx, x.data(), y.data());
    sgd.zero_grad();
    cross_entropy((*model)(x), y, Reduction::Mean).backward();
    sgd.step();
  }
  return flat_params(*model);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc != 5) {
      std::fprintf(stderr, "usage: reducer_mp_test W BATCH CAP_BYTES overlap|no-overlap\n");
      return 2;
    }
    const int world = std::atoi(argv[1]);
    const int64_t batch = std::atoll(argv[2]);
    const size_t cap = std::strtoull(argv[3], nullptr, 10);
    const bool overlap = std::string(argv[4]) == "overlap";
    if (std::getenv("RF_RANK")) return run_rank(batch, cap, overlap);

    char tmpl[] = "/tmp/reducer_mp_XXXXXX";
    if (!mkdtemp(tmpl)) throw Error("mkdtemp failed");
    const std::string dir = tmpl;
    comm::LocalLaunch l;
    l.program = "/proc/self/exe";
    l.args = {argv[1], argv[2], argv[3], argv[4]};
    l.world = world;
    l.deadline = std::chrono::milliseconds(45000);  // below the ctest TIMEOUT (60 s): a hang prints what each rank did
    l.store_dir = dir;
    l.env = {{"UCX_TLS", "self,sm,tcp"}};
    int bad = 0;
    for (const auto& e : comm::run_local_ranks(l))
      if (!e.ok()) std::fprintf(stderr, "%s\n", e.describe().c_str()), ++bad;
    std::vector<std::vector<float>> got(static_cast<size_t>(world));
    for (int r = 0; r < world && !bad; ++r) {
      std::ifstream f(dir + "/params-" + std::to_string(r) + ".bin", std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      got[r].resize(bytes.size() / sizeof(float));
      std::memcpy(got[r].data(), bytes.data(), got[r].size() * sizeof(float));
    }
    if (std::system(("rm -rf " + dir).c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
    if (bad) return 1;
    const std::vector<float> ref = single_process(batch);
    for (int r = 0; r < world; ++r) {
      if (got[r].size() != ref.size()) {
        std::fprintf(stderr, "rank %d wrote %zu parameters, expected %zu\n", r, got[r].size(), ref.size());
        return 1;
      }
      if (std::memcmp(got[r].data(), got[0].data(), sizeof(float) * ref.size()) != 0) {
        std::fprintf(stderr, "rank %d's parameters differ from rank 0's (R4 broken)\n", r);
        return 1;
      }
    }
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      worst = std::max(worst, std::abs(double(got[0][i]) - ref[i]) / (1e-3 + std::abs(double(ref[i]))));
    std::printf("W=%d batch %lld cap %zu %s: ranks bitwise equal; worst relative difference to one process %.3g\n",
                world, static_cast<long long>(batch), cap, overlap ? "overlap" : "no-overlap", worst);
    if (worst > 1e-4) {
      std::fprintf(stderr, "data-parallel result is not the single-process result (worst %.3g)\n", worst);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reducer_mp_test: %s\n", e.what());
    return 1;
  }
}
