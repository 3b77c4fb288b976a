// reducer_mp_test — the Reducer on real processes (UCX on loopback, FileStore): W ranks
// train the test MLP for some steps on their slices of each global batch (R3), then
//   * every rank's parameters are bitwise identical (R4),
//   * and equal, to float tolerance, to a single process training on the whole global
//     batch with the mean loss (the reducer divides by the GLOBAL count).
//
//   * with "ab": overlap on, off and switched between steps give bitwise the same weights.
//
//   reducer_mp_test W BATCH CAP_BYTES overlap|no-overlap|ab     (the launcher)
// Ranks run the same binary with RF_RANK/RF_WORLD/RF_STORE set (comm/bootstrap/local_launcher.h)
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
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/communicator.h"
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

// Trains a fresh test MLP for kSteps on this rank's slices; overlap_of(s) says whether
// step s overlaps. Collectives are tagged step + tag_base, so several trainings can share
// one communicator. Returns the final parameters, or empty on a wrong global count.
template <class OverlapOf>
std::vector<float> train(comm::Communicator& c, const comm::RankEnv& env, int64_t batch, size_t cap,
                         uint64_t tag_base, OverlapOf overlap_of) {
  auto model = ddp::testing::make_test_mlp(5, 48);
  optim::SGD sgd(model->named_parameters(), sgd_options());
  ddp::Reducer red(model->named_parameters(), {.bucket_cap_bytes = cap});
  const data::Dataset ds = ddp::testing::make_test_data(kSamples, 9);
  data::Sampler sampler(ds.n, batch, 3);
  for (int64_t s = 0; s < kSteps; ++s) {
    const auto idx = sampler.local_batch(s, env.rank, env.world);
    const int64_t b = static_cast<int64_t>(idx.size());
    red.set_overlap(overlap_of(s));
    red.begin_step(c, tag_base + static_cast<uint64_t>(s), {.samples = b});
    if (b > 0) {
      Tensor x = Tensor::empty({b, 1, 8, 8});
      std::vector<int32_t> y(static_cast<size_t>(b));
      data::gather_batch(ds, idx, x.data(), y.data());
      Tensor loss = ddp::testing::sum_loss((*model)(x), y);
      red.set_local_loss(loss);
      loss.backward();
    }
    const ddp::ControlBlock sum = red.finish();
    if (red.timeline().overlap != overlap_of(s)) {
      std::fprintf(stderr, "rank %d: step %lld ran with overlap %d, asked for %d\n", env.rank,
                   static_cast<long long>(s), int(red.timeline().overlap), int(overlap_of(s)));
      return {};
    }
    if (sum.samples != static_cast<int64_t>(sampler.global_batch(s).size())) {
      std::fprintf(stderr, "rank %d: step %lld global count %lld\n", env.rank, static_cast<long long>(s),
                   static_cast<long long>(sum.samples));
      return {};
    }
    sgd.step();
  }
  return flat_params(*model);
}

// mode: overlap | no-overlap | ab. "ab" trains three times on one communicator — overlap
// always on, always off, and switched every 2 steps (Reducer::set_overlap, the Trainer's
// overlap_ab_period) — and requires the three results to be bitwise equal: the A/B
// timing in ddp_bench compares two ways of running the SAME computation.
int run_rank(int64_t batch, size_t cap, const std::string& mode) {
  const comm::RankEnv env = comm::rank_env_from_environment();
  comm::FileStore store(env.store_dir);
  comm::CommOptions co;
  co.store = &store;
  co.rank = env.rank;
  co.world = env.world;
  co.generation = 1;
  const std::shared_ptr<comm::Communicator> comm_ptr = comm::make_communicator(comm::Backend::Ucx, co);
  comm::Communicator& c = *comm_ptr;
  std::vector<float> p;
  if (mode == "ab") {
    const std::vector<float> on = train(c, env, batch, cap, 0, [](int64_t) { return true; });
    const std::vector<float> off = train(c, env, batch, cap, 1000, [](int64_t) { return false; });
    p = train(c, env, batch, cap, 2000, [](int64_t s) { return ddp::overlap_ab_on(s, 2); });
    if (on.empty() || off.empty() || p.empty()) return 1;
    auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
    };
    if (!same_bits(on, off) || !same_bits(p, on)) {
      std::fprintf(stderr, "rank %d: overlap on / off / A-B give different weights (on==off %d, ab==on %d)\n",
                   env.rank, int(same_bits(on, off)), int(same_bits(p, on)));
      return 1;
    }
  } else {
    const bool overlap = mode == "overlap";
    p = train(c, env, batch, cap, 0, [overlap](int64_t) { return overlap; });
    if (p.empty()) return 1;
  }
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
      std::fprintf(stderr, "usage: reducer_mp_test W BATCH CAP_BYTES overlap|no-overlap|ab\n");
      return 2;
    }
    const int world = std::atoi(argv[1]);
    const int64_t batch = std::atoll(argv[2]);
    const size_t cap = std::strtoull(argv[3], nullptr, 10);
    const std::string mode = argv[4];
    if (mode != "overlap" && mode != "no-overlap" && mode != "ab")
      throw InvalidInput(str("mode must be overlap, no-overlap or ab, not '", mode, "'"));
    if (std::getenv("RF_RANK")) return run_rank(batch, cap, mode);

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
                world, static_cast<long long>(batch), cap, mode.c_str(), worst);
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
