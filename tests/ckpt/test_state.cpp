// ckpt/state.h: the state S (parameters + optimizer buffers + counters + step) round-trips
// bitwise through one image, and a damaged or mismatched image leaves S untouched (R6).
#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/format_error.h"
#include "ckpt/safetensors.h"
#include "ckpt/state.h"
#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/ops.h"
#include "core/optim/adamw.h"
#include "core/optim/sgd.h"
#include "core/random.h"

namespace {

using rf::ckpt::SnapshotMeta;
using Bytes = std::vector<std::byte>;

std::shared_ptr<rf::nn::Sequential> tiny_model(uint64_t seed, int64_t hidden = 6) {
  rf::Generator g(seed);
  auto m = std::make_shared<rf::nn::Sequential>();
  m->emplace<rf::nn::Linear>(4, hidden, g).emplace<rf::nn::ReLU>().emplace<rf::nn::Linear>(hidden, 3, g);
  return m;
}

// A few real training steps so momentum / Adam buffers and counters are non-trivial.
void train_steps(rf::nn::Module& m, rf::optim::Optimizer& opt, int steps, uint64_t seed) {
  rf::Generator g(seed);
  std::vector<float> x(8 * 4);
  std::vector<int32_t> y(8);
  for (int s = 0; s < steps; ++s) {
    for (auto& v : x) v = static_cast<float>(g.next_u64() % 1000) / 500.0f - 1.0f;
    for (auto& v : y) v = static_cast<int32_t>(g.next_u64() % 3);
    opt.zero_grad();
    rf::Tensor loss = rf::cross_entropy(m(rf::Tensor::from({8, 4}, x)), y);
    loss.backward();
    opt.step();
  }
}

std::vector<float> flat(const rf::nn::Module& m, const rf::optim::Optimizer& opt) {
  std::vector<float> out;
  for (auto& [n, t] : m.named_parameters()) out.insert(out.end(), t.values().begin(), t.values().end());
  for (auto& [n, t] : opt.named_buffers()) out.insert(out.end(), t.values().begin(), t.values().end());
  for (auto& [n, c] : opt.named_counters()) out.push_back(static_cast<float>(c));
  return out;
}

SnapshotMeta meta(int64_t step, const char* optimizer = "sgd") {
  return {.model = "tiny", .step = step, .generation = 3, .world_size = 2, .optimizer = optimizer,
          .optimizer_hparams = R"({"lr":0.1})"};
}

std::string error_of(const Bytes& image, rf::nn::Module& m, rf::optim::Optimizer& opt,
                     const rf::ckpt::RestoreExpect& expect = {}) {
  try {
    rf::ckpt::restore_state(image, m, opt, expect, "img");
  } catch (const rf::ckpt::FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("state round trip: model + SGD momentum, bitwise, names and metadata") {
  auto a = tiny_model(1);
  rf::optim::SGD sa(a->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*a, sa, 3, 7);
  Bytes image;
  rf::ckpt::serialize_state(*a, sa, meta(2), image);
  CHECK(image.size() == rf::ckpt::snapshot_size(*a, sa, meta(2)));

  auto r = rf::ckpt::SafetensorsReader::borrow(image, "img");
  CHECK(r.find("0.weight") != nullptr);
  CHECK(r.find("optim.0.weight.momentum_buffer") != nullptr);
  REQUIRE(r.find("optim.2.bias.step") != nullptr);
  CHECK(r.find("optim.2.bias.step")->dtype == rf::ckpt::DType::I64);
  CHECK(r.metadata().at("rf_state_digest") == rf::ckpt::state_digest_of(*a, sa));

  auto b = tiny_model(2);  // different init, fresh optimizer
  rf::optim::SGD sb(b->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  CHECK(rf::ckpt::state_digest_of(*a, sa) != rf::ckpt::state_digest_of(*b, sb));
  const SnapshotMeta got = rf::ckpt::restore_state(image, *b, sb, {.model = "tiny", .step = 2});
  CHECK(got.step == 2);
  CHECK(got.generation == 3);
  CHECK(rf::ckpt::state_digest_of(*a, sa) == rf::ckpt::state_digest_of(*b, sb));
  const auto fa = flat(*a, sa), fb = flat(*b, sb);
  REQUIRE(fa.size() == fb.size());
  CHECK(std::memcmp(fa.data(), fb.data(), fa.size() * sizeof(float)) == 0);

  // Continuing both from the same state gives the same state (the counters came along:
  // SGD's first step with momentum differs from later ones).
  train_steps(*a, sa, 2, 9);
  train_steps(*b, sb, 2, 9);
  CHECK(rf::ckpt::state_digest_of(*a, sa) == rf::ckpt::state_digest_of(*b, sb));
}

TEST_CASE("state round trip: AdamW buffers and step counters, bitwise") {
  auto a = tiny_model(3);
  rf::optim::AdamW oa(a->named_parameters(), {.lr = 0.01f});
  train_steps(*a, oa, 4, 11);
  Bytes image;
  rf::ckpt::serialize_state(*a, oa, meta(3, "adamw"), image);
  auto b = tiny_model(4);
  rf::optim::AdamW ob(b->named_parameters(), {.lr = 0.01f});
  rf::ckpt::restore_state(image, *b, ob, {.optimizer = "adamw"});
  CHECK(rf::ckpt::state_digest_of(*a, oa) == rf::ckpt::state_digest_of(*b, ob));
  for (auto& [n, c] : ob.named_counters()) CHECK(c == 4);
  train_steps(*a, oa, 3, 13);  // bias correction uses the counters: they must have come along
  train_steps(*b, ob, 3, 13);
  CHECK(rf::ckpt::state_digest_of(*a, oa) == rf::ckpt::state_digest_of(*b, ob));
}

TEST_CASE("serialize_state reuses the caller's buffer") {
  auto a = tiny_model(1);
  rf::optim::SGD sa(a->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  Bytes image;
  rf::ckpt::serialize_state(*a, sa, meta(0), image);
  const std::byte* first = image.data();
  train_steps(*a, sa, 1, 1);
  rf::ckpt::serialize_state(*a, sa, meta(1), image);
  CHECK(image.data() == first);
}

TEST_CASE("StateCopy: captured at the boundary, serialized later, equals serialize_state at capture") {
  auto a = tiny_model(5);
  rf::optim::SGD sa(a->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*a, sa, 2, 3);
  Bytes direct, later;
  rf::ckpt::serialize_state(*a, sa, meta(1), direct);
  rf::ckpt::StateCopy copy;
  copy.capture(*a, sa, meta(1));
  train_steps(*a, sa, 2, 4);  // training goes on; the copy must not see it
  copy.serialize(later);
  CHECK(later == direct);
}

TEST_CASE("R6: a cut-short, corrupted or mismatched image leaves the old state bitwise intact") {
  auto a = tiny_model(1);
  rf::optim::SGD sa(a->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*a, sa, 3, 7);
  Bytes image;
  rf::ckpt::serialize_state(*a, sa, meta(2), image);

  auto b = tiny_model(2);
  rf::optim::SGD sb(b->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*b, sb, 1, 8);
  const auto before = flat(*b, sb);
  const std::string before_digest = rf::ckpt::state_digest_of(*b, sb);
  auto intact = [&] {
    const auto now = flat(*b, sb);
    return now.size() == before.size() && std::memcmp(now.data(), before.data(), now.size() * sizeof(float)) == 0 &&
           rf::ckpt::state_digest_of(*b, sb) == before_digest;
  };

  SUBCASE("cut short at every length") {
    for (size_t n = 0; n < image.size(); ++n) {
      Bytes cut(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(n));
      CAPTURE(n);
      CHECK(!error_of(cut, *b, sb).empty());
      REQUIRE(intact());
    }
  }
  SUBCASE("a flipped byte anywhere") {
    for (size_t i = 0; i < image.size(); i += 3) {
      Bytes bad = image;
      bad[i] ^= std::byte{0x20};
      CAPTURE(i);
      CHECK(!error_of(bad, *b, sb).empty());
      REQUIRE(intact());
    }
  }
  SUBCASE("a flipped byte in the last tensor names it") {
    Bytes bad = image;
    bad[bad.size() - 1] ^= std::byte{1};
    const std::string e = error_of(bad, *b, sb);
    CHECK(e.find("img") != std::string::npos);
    CHECK(e.find("corrupted") != std::string::npos);
    CHECK(intact());
  }
  SUBCASE("wrong model shape: every difference named") {
    auto c = tiny_model(1, /*hidden=*/5);
    rf::optim::SGD sc(c->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
    Bytes other;
    rf::ckpt::serialize_state(*c, sc, meta(2), other);
    const std::string e = error_of(other, *b, sb);
    CHECK(e.find("'0.weight' shape is [5, 4], expected [6, 4]") != std::string::npos);
    CHECK(e.find("'optim.2.weight.momentum_buffer' shape is [3, 5], expected [3, 6]") != std::string::npos);
    CHECK(intact());
  }
  SUBCASE("other optimizer") {
    rf::optim::AdamW ab(b->named_parameters(), {});
    Bytes adam;
    rf::ckpt::serialize_state(*b, ab, meta(2, "adamw"), adam);
    const std::string e = error_of(adam, *b, sb);
    CHECK(e.find("'optim.0.weight.momentum_buffer' missing") != std::string::npos);
    CHECK(e.find("'optim.0.weight.exp_avg' unexpected") != std::string::npos);
    CHECK(intact());
  }
  SUBCASE("expectations: model, step, digest") {
    CHECK(error_of(image, *b, sb, {.model = "mlp"}).find("model 'tiny', expected 'mlp'") != std::string::npos);
    CHECK(error_of(image, *b, sb, {.step = 5}).find("step 2, expected step 5") != std::string::npos);
    CHECK(error_of(image, *b, sb, {.digest = before_digest}).find("expected " + before_digest) != std::string::npos);
    CHECK(intact());
    CHECK(error_of(image, *b, sb, {.step = 2, .digest = rf::ckpt::state_digest_of(*a, sa)}).empty());
    CHECK(rf::ckpt::state_digest_of(*b, sb) == rf::ckpt::state_digest_of(*a, sa));
  }
}
