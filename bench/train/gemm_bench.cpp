// gemm_bench — our GEMM kernels against Eigen's, per shape of the reference models, on one
// thread. Each round times `reps` calls of ours, then of Eigen (alternating which goes
// first), in this thread's CPU time (CLOCK_THREAD_CPUTIME_ID: time spent waiting for a core
// on a shared machine is left out); the ratio of a round is Eigen's time over ours, and
// the figure is the median over the rounds (> 1: ours is faster).
//
//   gemm_bench [--rounds 15] [--reps 20] [--kernel packed|small|routed] [--baseline eigen|small]
//     packed: gemm_packed (gemm_packed.h) on every shape; small: gemm_small (NN/TN only);
//     routed: gemm() as the framework calls it (whatever kernel it picks).
//     --baseline small compares against gemm_small instead of Eigen (NN/TN shapes only).
// Output: one line per shape: name, ta tb M N K beta, GFLOP/s of each, median ratio.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/gemm_small.h"

using namespace rf::kernels::cpu;

namespace {

struct Shape {
  const char* name;
  bool ta, tb;
  int64_t M, N, K;
  float beta;
};

// Linear(in -> out) with batch B: forward x W^T is NT (M=B, N=out, K=in); the input
// gradient G W is NN (M=B, N=in, K=out); the weight gradient G^T x is TN (M=out, N=in, K=B).
const Shape kShapes[] = {
    {"mlp fc1 fwd", false, true, 128, 512, 784, 0.0f},
    {"mlp fc2 fwd", false, true, 128, 512, 512, 0.0f},
    {"mlp fc3 fwd", false, true, 128, 10, 512, 0.0f},
    {"mlp fc2 dx", false, false, 128, 512, 512, 0.0f},
    {"mlp fc3 dx", false, false, 128, 512, 10, 0.0f},
    {"mlp fc1 dW", true, false, 512, 784, 128, 0.0f},
    {"mlp fc2 dW", true, false, 512, 512, 128, 0.0f},
    {"mlp fc3 dW", true, false, 10, 512, 128, 0.0f},
    {"mlp64 fc1 fwd", false, true, 64, 512, 784, 0.0f},
    {"mlp64 fc2 fwd", false, true, 64, 512, 512, 0.0f},
    {"mlp64 fc2 dx", false, false, 64, 512, 512, 0.0f},
    {"mlp64 fc1 dW", true, false, 512, 784, 64, 0.0f},
    {"mlp64 fc2 dW", true, false, 512, 512, 64, 0.0f},
    {"cnn fc1 fwd", false, true, 128, 128, 1568, 0.0f},
    {"cnn fc1 dx", false, false, 128, 1568, 128, 0.0f},
    {"cnn fc1 dW", true, false, 128, 1568, 128, 0.0f},
    {"cnn fc2 fwd", false, true, 128, 10, 128, 0.0f},
    {"beta1 fc2 dW", true, false, 512, 512, 128, 1.0f},
    // Per-sample convolution GEMMs (gemm_small's shapes): W[32 x 400] col[400 x 196] and
    // the column gradient W^T G.
    {"conv2 fwd", false, false, 32, 196, 400, 0.0f},
    {"conv2 dcol", true, false, 400, 196, 32, 0.0f},
    {"conv1 fwd", false, false, 16, 784, 25, 0.0f},
};

double thread_cpu() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, reps = 20;
  std::string kernel = "packed", baseline = "eigen";
  rf::bench::Flags flags("gemm_bench", "gemm_bench [flags]   (our GEMM kernels against a baseline, paired per round)");
  flags.integer("--rounds", "paired rounds per shape (default 15)", rounds, 1)
      .integer("--reps", "calls per timing (default 20)", reps, 1)
      .text("--kernel", "packed|small|routed", "ours (default packed)", kernel)
      .text("--baseline", "eigen|small", "the baseline (default eigen)", baseline);
  if (const int rc = flags.parse_or_exit_code(argc, argv); rc >= 0) return rc;
  if (kernel != "packed" && kernel != "small" && kernel != "routed")
    return flags.fail("--kernel: '" + kernel + "' is not packed, small or routed");
  if (baseline != "eigen" && baseline != "small") return flags.fail("--baseline: '" + baseline + "' is not eigen or small");
  if ((kernel != "routed" || baseline != "eigen") && !gemm_packed_available()) {
    std::fprintf(stderr, "gemm_bench: this build has no AVX-512 kernels\n");
    return 2;
  }
  set_num_threads(1);
  std::printf("%-14s %2s %2s %5s %5s %5s %4s  %8s %8s  %s\n", "shape", "ta", "tb", "M", "N", "K",
              "beta", "ours", baseline.c_str(), "median base/ours (GFLOP/s of the medians)");
  for (const Shape& s : kShapes) {
    if ((kernel == "small" || baseline == "small") && s.tb) continue;
    const int64_t ar = s.ta ? s.K : s.M, ac = s.ta ? s.M : s.K;
    const int64_t br = s.tb ? s.N : s.K, bc = s.tb ? s.K : s.N;
    std::vector<float> A(ar * ac), B(br * bc), C(s.M * s.N);
    for (size_t i = 0; i < A.size(); ++i) A[i] = std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < B.size(); ++i) B[i] = std::cos(0.11f * static_cast<float>(i));
    auto ours = [&] {
      if (kernel == "packed")
        gemm_packed(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, s.beta, C.data(), s.N);
      else if (kernel == "small")
        gemm_small(s.M, s.N, s.K, 1.0f, A.data(), s.ta ? 1 : ac, s.ta ? ac : 1, B.data(), bc, s.beta,
                   C.data(), s.N);
      else
        gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, s.beta, C.data(), s.N);
    };
    auto eigen = [&] {
      if (baseline == "small")
        gemm_small(s.M, s.N, s.K, 1.0f, A.data(), s.ta ? 1 : ac, s.ta ? ac : 1, B.data(), bc, s.beta,
                   C.data(), s.N);
      else gemm_eigen(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, s.beta, C.data(), s.N);
    };
    auto timed = [&](auto& f) {
      const double t0 = thread_cpu();
      for (int r = 0; r < reps; ++r) f();
      return thread_cpu() - t0;
    };
    for (int w = 0; w < 3; ++w) {  // warm caches, buffers, page faults
      ours();
      eigen();
    }
    std::vector<double> ratio, t_ours, t_eigen;
    for (int r = 0; r < rounds; ++r) {
      double to, te;
      if (r % 2 == 0) {
        to = timed(ours);
        te = timed(eigen);
      } else {
        te = timed(eigen);
        to = timed(ours);
      }
      ratio.push_back(te / to);
      t_ours.push_back(to);
      t_eigen.push_back(te);
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const size_t n = v.size();
      return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    };
    const double flop = 2.0 * static_cast<double>(s.M * s.N * s.K) * reps;
    std::printf("%-14s %2d %2d %5ld %5ld %5ld %4.0f  %8.1f %8.1f  %.2fx\n", s.name, s.ta, s.tb,
                static_cast<long>(s.M), static_cast<long>(s.N), static_cast<long>(s.K), s.beta,
                flop / median(t_ours) * 1e-9, flop / median(t_eigen) * 1e-9, median(ratio));
  }
  return 0;
}
