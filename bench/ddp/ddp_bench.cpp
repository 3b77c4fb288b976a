// ddp_bench — failure-free cost of fault tolerance and the gain of overlap, in one run:
// the reference MLP or CNN trained data-parallel (W ranks, one thread each, synthetic
// Fashion-MNIST-shaped data) in three variants, interleaved round by round (ABCABC) so
// machine noise hits all of them alike:
//   ft      the resilient Trainer under `ringfence run` (coordinator, heartbeats, control
//           block flags), overlap on
//   plain   the same loop with fault tolerance off (comm's local launcher, FileStore)
//   ft-seq  fault tolerance on, overlap off (every bucket all-reduced after backward)
// Each variant's rank 0 reports the median step time over the steps after --warmup.
//
//   ddp_bench [--model mlp|cnn] [--world 2] [--steps 150] [--warmup 20] [--batch 128]
//             [--rounds 3] [--bucket-kib 25600] [--variants ft,plain,ft-seq]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/local_launcher.h"
#include "core/data/data.h"
#include "core/ops.h"
#include "core/optim/sgd.h"
#include "ddp/trainer.h"
#include "kernels/cpu/gemm.h"
#include "models/reference.h"

extern char** environ;
using namespace rf;

namespace {

struct Opts {
  std::string model = "mlp";
  int world = 2;
  int64_t steps = 150, warmup = 20, batch = 128, rounds = 3, bucket_kib = 25 << 10;
  std::string variants = "ft,plain,ft-seq";
};

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("readlink /proc/self/exe failed");
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> child_args(const Opts& o, const std::string& variant, const std::string& out) {
  return {"--child", variant, "--out", out, "--model", o.model, "--steps", std::to_string(o.steps),
          "--warmup", std::to_string(o.warmup), "--batch", std::to_string(o.batch),
          "--bucket-kib", std::to_string(o.bucket_kib)};
}

// One rank of one variant: train, and (rank 0) write the median step time in ms.
int child(const Opts& o, const std::string& variant, const std::string& out) {
  kernels::cpu::set_num_threads(1);
  ddp::TrainerConfig cfg;
  cfg.steps = o.steps;
  cfg.global_batch = o.batch;
  cfg.fault_tolerance = variant != "plain";
  cfg.reducer.overlap = variant != "ft-seq";
  cfg.reducer.bucket_cap_bytes = static_cast<size_t>(o.bucket_kib) << 10;
  const auto kind = o.model == "cnn" ? models::ModelKind::CNN : models::ModelKind::MLP;
  cfg.model_name = models::model_name(kind);
  std::vector<TimePoint> at;
  at.reserve(static_cast<size_t>(o.steps));
  cfg.on_step = [&](int64_t, double) { at.push_back(Clock::now()); };
  auto net = models::make_model(kind, 0);
  const data::Dataset ds = data::make_synthetic(8192, 1, 28, 28, 10, 1);
  optim::SGD sgd(net->named_parameters(), {.lr = 0.05f, .momentum = 0.9f});
  ddp::Trainer trainer(
      *net, [](const Tensor& x, std::span<const int32_t> y) { return cross_entropy(x, y, Reduction::Sum); }, ds, sgd,
      cfg);
  const ddp::TrainerResult r = trainer.run();
  const char* rank = std::getenv(cfg.fault_tolerance ? "RINGFENCE_SLOT" : "RF_RANK");
  if (rank && std::string(rank) == "0") {
    std::vector<double> dt;
    for (size_t i = static_cast<size_t>(o.warmup) + 1; i < at.size(); ++i)
      dt.push_back(std::chrono::duration<double, std::milli>(at[i] - at[i - 1]).count());
    if (dt.empty()) throw InvalidInput("--steps must exceed --warmup + 1");
    std::nth_element(dt.begin(), dt.begin() + static_cast<long>(dt.size() / 2), dt.end());
    std::ofstream(out) << dt[dt.size() / 2] << " " << r.digest << "\n";
  }
  return 0;
}

int spawn_wait(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, a[0], nullptr, nullptr, a.data(), environ) != 0) throw Error(str("cannot start ", argv[0]));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return status;
}

double run_variant(const Opts& o, const std::string& variant, const std::string& dir) {
  const std::string out = str(dir, "/", variant, ".txt");
  std::remove(out.c_str());
  const std::string self = self_path();
  if (variant == "plain") {
    comm::LocalLaunch l;
    l.program = self;
    l.args = child_args(o, variant, out);
    l.world = o.world;
    l.deadline = std::chrono::milliseconds(300000);
    for (const auto& e : comm::run_local_ranks(l))
      if (!e.ok()) throw Error(str("plain variant: ", e.describe()));
  } else {
    const std::string ringfence = self.substr(0, self.rfind('/')) + "/ringfence";
    std::vector<std::string> argv{ringfence, "run", "-n", std::to_string(o.world), "--quiet", "--", self};
    for (auto& a : child_args(o, variant, out)) argv.push_back(a);
    const int st = spawn_wait(argv);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) throw Error(str(variant, " variant: ringfence run failed"));
  }
  double ms = 0;
  std::string digest;
  std::ifstream in(out);
  if (!(in >> ms >> digest)) throw Error(str(variant, " variant: rank 0 wrote no result"));
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  std::string variant, out;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string f = argv[i];
      if (i + 1 >= argc) throw InvalidInput(str(f, " needs a value"));
      const std::string v = argv[++i];
      if (f == "--model") o.model = v;
      else if (f == "--world") o.world = std::stoi(v);
      else if (f == "--steps") o.steps = std::stoll(v);
      else if (f == "--warmup") o.warmup = std::stoll(v);
      else if (f == "--batch") o.batch = std::stoll(v);
      else if (f == "--rounds") o.rounds = std::stoll(v);
      else if (f == "--bucket-kib") o.bucket_kib = std::stoll(v);
      else if (f == "--variants") o.variants = v;
      else if (f == "--child") variant = v;
      else if (f == "--out") out = v;
      else throw InvalidInput(str("unknown option ", f));
    }
    if (o.model != "mlp" && o.model != "cnn") throw InvalidInput("--model: mlp or cnn");
    if (!variant.empty()) return child(o, variant, out);

    char tmpl[] = "/tmp/ddp_bench_XXXXXX";
    if (!::mkdtemp(tmpl)) throw Error("mkdtemp failed");
    std::vector<std::string> variants;
    for (size_t a = 0; a <= o.variants.size();) {
      size_t b = o.variants.find(',', a);
      if (b == std::string::npos) b = o.variants.size();
      const std::string v = o.variants.substr(a, b - a);
      if (v != "ft" && v != "plain" && v != "ft-seq") throw InvalidInput(str("--variants: unknown '", v, "'"));
      variants.push_back(v);
      a = b + 1;
    }
    std::map<std::string, std::vector<double>> ms;
    std::printf("# ddp_bench: %s, W=%d, batch %lld (global), 1 thread per rank, bucket cap %lld KiB, %lld steps "
                "(median step time after %lld)\n",
                o.model.c_str(), o.world, static_cast<long long>(o.batch), static_cast<long long>(o.bucket_kib),
                static_cast<long long>(o.steps), static_cast<long long>(o.warmup));
    for (int64_t r = 0; r < o.rounds; ++r)
      for (const auto& v : variants) {
        ms[v].push_back(run_variant(o, v, tmpl));
        std::printf("round %lld  %-7s %8.3f ms/step  %8.0f samples/s\n", static_cast<long long>(r), v.c_str(),
                    ms[v].back(), 1000.0 * o.batch / ms[v].back());
        std::fflush(stdout);
      }
    auto best = [&](const std::string& v) { return *std::min_element(ms[v].begin(), ms[v].end()); };
    if (variants.size() == 3) {
    std::printf("best: ft %.3f ms, plain %.3f ms, ft-seq %.3f ms\n", best("ft"), best("plain"), best("ft-seq"));
    std::printf("fault-tolerance overhead (ft / plain - 1): %+.2f %%\n", 100.0 * (best("ft") / best("plain") - 1));
    std::printf("overlap gain (ft-seq / ft - 1): %+.2f %%\n", 100.0 * (best("ft-seq") / best("ft") - 1));
    }
    if (std::system(str("rm -rf ", tmpl).c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", tmpl);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_bench: %s\n", e.what());
    return 1;
  }
}
