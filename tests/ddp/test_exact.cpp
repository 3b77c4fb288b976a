// Exact mode's sum (ddp/fixed_point.h, ddp/exact_reducer.h): the fixed-point conversions
// against a 128-bit reference, and ExactReducer on W = 1..6 ranks as threads over an
// in-process communicator: every W gives the same gradient bits, every rank alike; a NaN on
// one rank stops the step on all of them naming the tensor.
#include <doctest/doctest.h>

#include <barrier>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/data/sampler.h"
#include "ddp/exact_reducer.h"
#include "ddp/fixed_point.h"
#include "ddp/reducer.h"
#include "test_model.h"
#include "tests/comm/null_communicator.h"

using namespace rf;
namespace ex = rf::ddp::exact;
__extension__ typedef __int128 i128;  // the reference sum, beyond int64

TEST_CASE("fixed point: headroom, shift and the bound that keeps int64 from overflowing") {
  CHECK(ex::headroom_bits(1) == 0);
  CHECK(ex::headroom_bits(2) == 1);
  CHECK(ex::headroom_bits(8) == 3);
  CHECK(ex::headroom_bits(9) == 4);
  CHECK(ex::fixed_shift(0.0f, 8) == 0);
  for (float m : {1e-30f, 3e-8f, 0.5f, 1.0f, 1.5f, 1000.0f, 3e38f}) {
    for (int64_t addends : {1, 7, 8, 64}) {
      const int s = ex::fixed_shift(m, addends);
      int64_t q = 0;
      ex::add_fixed(&m, 1, s, &q);
      const long double bound = std::ldexp(1.0L, 62 - ex::headroom_bits(addends));
      CHECK(static_cast<long double>(q) <= bound);
      CHECK(static_cast<long double>(q) >= bound / 2);  // and it uses the range
    }
  }
}

TEST_CASE("fixed point: max_abs sees signs, infinities and NaN") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{0.5f, -3.0f, 2.0f, -0.0f};
  CHECK(ex::max_abs(x.data(), 4) == 3.0f);
  CHECK(ex::max_abs(x.data(), 0) == 0.0f);
  x[2] = nan;
  CHECK(std::isinf(ex::max_abs(x.data(), 4)));
  x[2] = -inf;
  CHECK(std::isinf(ex::max_abs(x.data(), 4)));
  const float denormal = std::numeric_limits<float>::denorm_min();
  CHECK(ex::max_abs(&denormal, 1) == denormal);
}

TEST_CASE("fixed point: every addend rounded to nearest even, the sum the same in any order and split") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 4099, addends = 6;
  std::vector<std::vector<float>> x(addends, std::vector<float>(n));
  float largest = 0.0f;
  for (auto& v : x)
    for (auto& e : v) {
      e = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30);  // 40 binades
      largest = std::max(largest, std::fabs(e));
    }
  const int s = ex::fixed_shift(largest, addends);
  // the reference: each addend's exact value times 2^s, rounded half to even, in 128 bits
  std::vector<i128> want(n, 0);
  for (const auto& v : x)
    for (int64_t i = 0; i < n; ++i) want[i] += static_cast<i128>(std::nearbyintl(std::ldexp(static_cast<long double>(v[i]), s)));
  std::vector<int64_t> forward(n, 0), backward(n, 0), split_a(n, 0), split_b(n, 0);
  for (int k = 0; k < addends; ++k) ex::add_fixed(x[k].data(), n, s, forward.data());
  for (int k = addends - 1; k >= 0; --k) ex::add_fixed(x[k].data(), n, s, backward.data());
  for (int k = 0; k < addends; ++k) ex::add_fixed(x[k].data(), n, s, (k % 2 ? split_a : split_b).data());
  for (int64_t i = 0; i < n; ++i) {
    REQUIRE(static_cast<i128>(forward[i]) == want[i]);
    REQUIRE(backward[i] == forward[i]);
    REQUIRE(split_a[i] + split_b[i] == forward[i]);
  }
  // one rounding to float, the division included, matches long double's
  std::vector<float> out(n);
  ex::round_fixed(forward.data(), n, s, 128.0, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const long double exact = std::ldexp(static_cast<long double>(forward[i]), -s) / 128.0L;
    REQUIRE(std::fabs(static_cast<long double>(out[i]) - exact) <= std::fabs(exact) * 0x1p-23L);
  }
  int64_t q = 0;
  const float tie = 2.5f;  // 2.5 * 2^0 rounds to 2, 3.5 to 4
  ex::add_fixed(&tie, 1, 0, &q);
  CHECK(q == 2);
  const float tie2 = -3.5f;
  ex::add_fixed(&tie2, 1, 0, &q);
  CHECK(q == -2);
}

namespace {

class Done : public comm::Work {
 public:
  bool test() override { return true; }
  void wait(TimePoint) override {}
};

// W threads in one process: the collectives exact mode uses (all-gather, all-reduce of
// int64), through a shared board and a barrier. Every rank sums the board in rank order.
struct Board {
  explicit Board(int w) : world(w), sync(w), slots(w) {}
  int world;
  std::barrier<> sync;
  std::vector<std::vector<char>> slots;
};

class ThreadComm : public comm::testing::NullCommunicator {
 public:
  ThreadComm(Board& b, int rank) : b_(b), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return b_.world; }
  comm::WorkPtr allreduce_start(comm::Buffer buf, comm::OpId, comm::Stream) override {
    REQUIRE(buf.dtype == comm::DType::i64);
    publish(buf.data, buf.bytes());
    std::vector<int64_t> sum(buf.count, 0);
    for (int r = 0; r < b_.world; ++r) {
      const auto* v = reinterpret_cast<const int64_t*>(b_.slots[r].data());
      for (size_t i = 0; i < buf.count; ++i) sum[i] += v[i];
    }
    b_.sync.arrive_and_wait();
    std::memcpy(buf.data, sum.data(), buf.bytes());
    return std::make_shared<Done>();
  }
  comm::WorkPtr allgather_start(comm::Buffer in, comm::Buffer out, comm::OpId, comm::Stream) override {
    publish(in.data, in.bytes());
    for (int r = 0; r < b_.world; ++r) std::memcpy(static_cast<char*>(out.data) + r * in.bytes(), b_.slots[r].data(), in.bytes());
    b_.sync.arrive_and_wait();
    return std::make_shared<Done>();
  }

 private:
  void publish(const void* p, size_t n) {
    b_.slots[rank_].assign(static_cast<const char*>(p), static_cast<const char*>(p) + n);
    b_.sync.arrive_and_wait();
  }
  Board& b_;
  int rank_;
};

constexpr int kM = 6;
constexpr int64_t kBatch = 30;

struct RankResult {
  std::vector<float> grads;  // every parameter's gradient, in registration order
  double loss = 0;
  int64_t samples = 0;
  std::string error;
};

// One step of exact mode on rank r of W: this rank's micro-shards of the batch, each forward
// and backward alone, then ExactReducer::finish. poison_rank's first input gets a NaN.
RankResult exact_step(Board& board, int r, int poison_rank) {
  const data::Dataset ds = ddp::testing::make_test_data(kBatch, 3);
  auto model = ddp::testing::make_test_mlp(11, 16);
  const auto params = model->named_parameters();
  ddp::ReducerOptions ro;
  ro.bucket_cap_bytes = 2048;  // several buckets
  ro.shared_buckets = false;
  ddp::Reducer red(params, ro);
  ddp::ExactReducer exact(red, params, kM);
  ThreadComm comm(board, r);
  const auto [first, last] = data::Sampler::partition(kM, r, board.world);
  ddp::ControlBlock cb;
  std::vector<std::pair<int64_t, int64_t>> shards;
  for (auto j = first; j < last; ++j) {
    shards.push_back(data::Sampler::partition(kBatch, static_cast<int>(j), kM));
    cb.samples += shards.back().second - shards.back().first;
  }
  exact.begin_step(comm, 0, cb, static_cast<int>(shards.size()));
  for (const auto& [b, e] : shards) {
    exact.begin_shard();
    std::vector<int64_t> idx;
    for (int64_t i = b; i < e; ++i) idx.push_back(i);
    Tensor x = Tensor::empty({e - b, 1, 8, 8});
    std::vector<int32_t> y(static_cast<size_t>(e - b));
    data::gather_batch(ds, idx, x.data(), y.data());
    if (r == poison_rank && b == shards.front().first) x.data()[0] = std::numeric_limits<float>::quiet_NaN();
    Tensor loss = ddp::testing::sum_loss((*model)(x), y);
    loss.backward();
    exact.end_shard(loss);
  }
  RankResult out;
  try {
    out.samples = exact.finish().samples;
  } catch (const ddp::NonFiniteGradient& e) {
    out.error = e.what();
    return out;
  }
  out.loss = exact.global_loss();
  for (const auto& [name, p] : params) {
    const Tensor g = p.grad();
    out.grads.insert(out.grads.end(), g.data(), g.data() + g.numel());
  }
  return out;
}

std::vector<RankResult> run_ranks(int w, int poison_rank = -1) {
  Board board(w);
  std::vector<RankResult> results(w);
  std::vector<std::thread> threads;
  for (int r = 0; r < w; ++r) threads.emplace_back([&, r] { results[r] = exact_step(board, r, poison_rank); });
  for (auto& t : threads) t.join();
  return results;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

}  // namespace

TEST_CASE("ExactReducer: the same gradient bits and loss for W = 1..6 (and W > M), on every rank") {
  const std::vector<RankResult> one = run_ranks(1);
  REQUIRE(one[0].error.empty());
  REQUIRE(one[0].samples == kBatch);
  // the mean gradient, close to one float backward over the whole batch
  {
    const data::Dataset ds = ddp::testing::make_test_data(kBatch, 3);
    auto model = ddp::testing::make_test_mlp(11, 16);
    Tensor x = Tensor::empty({kBatch, 1, 8, 8});
    std::vector<int32_t> y(kBatch);
    std::vector<int64_t> idx(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) idx[i] = i;
    data::gather_batch(ds, idx, x.data(), y.data());
    ddp::testing::sum_loss((*model)(x), y).backward();
    size_t at = 0;
    for (const auto& [name, p] : model->named_parameters()) {
      const Tensor g = p.grad();
      for (int64_t i = 0; i < g.numel(); ++i, ++at)
        REQUIRE(one[0].grads[at] == doctest::Approx(g.data()[i] / kBatch).epsilon(1e-4));
    }
  }
  for (int w : {2, 3, 4, 5, 6, 8}) {
    CAPTURE(w);
    const std::vector<RankResult> many = run_ranks(w);
    for (int r = 0; r < w; ++r) {
      CAPTURE(r);
      REQUIRE(many[r].error.empty());
      CHECK(many[r].samples == kBatch);
      CHECK(same_bits(many[r].grads, one[0].grads));
      CHECK(std::bit_cast<uint64_t>(many[r].loss) == std::bit_cast<uint64_t>(one[0].loss));
    }
  }
}

TEST_CASE("ExactReducer: a NaN on one rank stops the step on every rank, naming the tensor and the rank") {
  const std::vector<RankResult> res = run_ranks(3, /*poison_rank=*/1);
  for (const RankResult& r : res) {
    CHECK(r.grads.empty());
    CHECK(r.error == res[0].error);
  }
  CHECK(res[0].error.find("step 0") != std::string::npos);
  CHECK(res[0].error.find("on rank 1") != std::string::npos);
  CHECK(res[0].error.find("gradient of '") != std::string::npos);
}
