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
  } catch (const rf::ckpt::FormatError& e) {  // DigestVersionMismatch included
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
    // The same hex without its version (a plan made from another build's reports):
    // refused as incomparable, not as a mismatch.
    const std::string unversioned = rf::ckpt::state_digest_of(*a, sa).substr(3);
    CHECK(error_of(image, *b, sb, {.step = 2, .digest = unversioned}).find("digests of two versions, 'x3'") !=
          std::string::npos);
    CHECK(intact());
    CHECK(error_of(image, *b, sb, {.step = 2, .digest = rf::ckpt::state_digest_of(*a, sa)}).empty());
    CHECK(rf::ckpt::state_digest_of(*b, sb) == rf::ckpt::state_digest_of(*a, sa));
  }
  SUBCASE("expectation: the job that wrote it (a whole-job restart restores only its own)") {
    CHECK(error_of(image, *b, sb, {.job_id = "job-b"}).find("records no job id, expected job job-b's") !=
          std::string::npos);
    rf::ckpt::SnapshotMeta m = meta(2);
    m.job_id = "job-a";
    Bytes stamped;
    rf::ckpt::serialize_state(*a, sa, m, stamped);
    CHECK(error_of(stamped, *b, sb, {.job_id = "job-b"}).find("written by job job-a, expected job job-b") !=
          std::string::npos);
    CHECK(intact());
    CHECK(error_of(stamped, *b, sb, {.job_id = "job-a"}).empty());
    CHECK(rf::ckpt::state_digest_of(*b, sb) == rf::ckpt::state_digest_of(*a, sa));  // the id is not state
  }
}

TEST_CASE("restore_state: the digest it reports is the restored state's, fused pass or not") {
  // restore_state hashes rf_state_digest from the image's data during the CRC pass and
  // hands it out as the state's digest after the swap (no pass over S): it must equal a
  // fresh state_digest_of, for SGD and AdamW (counters), and for an image whose tensors
  // lie in another order (the second-pass path).
  auto a = tiny_model(1);
  rf::optim::SGD sa(a->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*a, sa, 3, 7);
  Bytes image;
  rf::ckpt::serialize_state(*a, sa, meta(2), image);
  auto b = tiny_model(2);
  rf::optim::SGD sb(b->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  std::string got;
  rf::ckpt::restore_state(image, *b, sb, {}, "img", &got);
  CHECK(got == rf::ckpt::state_digest_of(*b, sb));
  CHECK(got == rf::ckpt::state_digest_of(*a, sa));

  auto c = tiny_model(3);
  rf::optim::AdamW oc(c->named_parameters(), {.lr = 0.01f});
  train_steps(*c, oc, 4, 11);
  rf::ckpt::serialize_state(*c, oc, meta(3, "adamw"), image);
  auto d = tiny_model(4);
  rf::optim::AdamW od(d->named_parameters(), {.lr = 0.01f});
  rf::ckpt::restore_state(image, *d, od, {}, "img", &got);
  CHECK(got == rf::ckpt::state_digest_of(*d, od));
  CHECK(got == rf::ckpt::state_digest_of(*c, oc));

  // The same tensors and metadata, added in reverse order: the F32 data is no longer in
  // the order rf::state_digest hashes it.
  const auto r = rf::ckpt::SafetensorsReader::borrow(image, "img");
  rf::ckpt::SafetensorsWriter w;
  for (auto it = r.tensors().rbegin(); it != r.tensors().rend(); ++it)
    w.add(it->name, it->dtype, it->shape, r.bytes(*it).data());
  for (const auto& [k, v] : r.metadata())
    if (k != rf::ckpt::kCrcKey && k != rf::ckpt::kDigestKey && k != rf::ckpt::kMetaCrcKey) w.set_metadata(k, v);
  const Bytes reversed = w.to_bytes();
  REQUIRE(reversed != image);
  auto e = tiny_model(5);
  rf::optim::AdamW oe(e->named_parameters(), {.lr = 0.01f});
  got.clear();
  rf::ckpt::restore_state(reversed, *e, oe, {}, "img", &got);
  CHECK(got == rf::ckpt::state_digest_of(*e, oe));
  CHECK(got == rf::ckpt::state_digest_of(*c, oc));

  // No optimizer buffers (SGD without momentum): the buffer group is hashed empty.
  auto f = tiny_model(6);
  rf::optim::SGD sf(f->named_parameters(), {.lr = 0.1f});
  REQUIRE(sf.named_buffers().empty());
  train_steps(*f, sf, 2, 5);
  rf::ckpt::serialize_state(*f, sf, meta(2), image);
  auto g = tiny_model(7);
  rf::optim::SGD sg(g->named_parameters(), {.lr = 0.1f});
  got.clear();
  rf::ckpt::restore_state(image, *g, sg, {}, "img", &got);
  CHECK(got == rf::ckpt::state_digest_of(*g, sg));
  CHECK(got == rf::ckpt::state_digest_of(*f, sf));
}

TEST_CASE("R6: an image whose data does not hash to its rf_state_digest is refused") {
  // serialize_state takes the caller's digest (the trainer's memo) instead of computing
  // one; a stale one must not let a receiver accept the image on the strength of the
  // recorded string: restore_state recomputes it from the data.
  auto a = tiny_model(1);
  rf::optim::SGD sa(a->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*a, sa, 2, 7);
  const std::string stale = rf::ckpt::state_digest_of(*a, sa);
  train_steps(*a, sa, 1, 8);  // S changed; the "memo" did not
  Bytes image;
  rf::ckpt::serialize_state(*a, sa, meta(2), image, stale);
  auto b = tiny_model(2);
  rf::optim::SGD sb(b->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  const std::string before = rf::ckpt::state_digest_of(*b, sb);
  const std::string e = error_of(image, *b, sb, {.step = 2, .digest = stale});
  CHECK(e.find("img") != std::string::npos);
  CHECK(e.find("the data's state digest is " + rf::ckpt::state_digest_of(*a, sa)) != std::string::npos);
  CHECK(e.find("records rf_state_digest " + stale) != std::string::npos);
  CHECK(rf::ckpt::state_digest_of(*b, sb) == before);
  // The right digest given by the caller is the one computed.
  rf::ckpt::serialize_state(*a, sa, meta(2), image, rf::ckpt::state_digest_of(*a, sa));
  CHECK(error_of(image, *b, sb, {.step = 2, .digest = rf::ckpt::state_digest_of(*a, sa)}).empty());
}

TEST_CASE("R6: a corrupted chunk in the middle of a large tensor is refused before the swap, naming it") {
  // The verification hashes a tensor chunk by chunk (256 KiB); a flip in a later chunk of
  // a multi-chunk tensor must fail its CRC — naming the tensor and the image bytes — and
  // leave S intact, although the chunks before it already went through the digests.
  auto a = tiny_model(1, /*hidden=*/40000);  // 0.weight: 40000 x 4 floats = 640 KB, 3 chunks
  rf::optim::SGD sa(a->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  train_steps(*a, sa, 1, 7);
  Bytes image;
  rf::ckpt::serialize_state(*a, sa, meta(0), image);
  const auto r = rf::ckpt::SafetensorsReader::borrow(image, "img");
  const rf::ckpt::TensorInfo& t = r.at("optim.0.weight.momentum_buffer");
  const size_t at = static_cast<size_t>(r.bytes(t).data() - image.data());
  auto b = tiny_model(2, 40000);
  rf::optim::SGD sb(b->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
  const auto before = flat(*b, sb);
  Bytes bad = image;
  bad[at + (size_t{300} << 10)] ^= std::byte{0x01};  // in its second chunk
  const std::string e = error_of(bad, *b, sb, {.step = 0, .digest = rf::ckpt::state_digest_of(*a, sa)});
  CHECK(e.find("tensor 'optim.0.weight.momentum_buffer'") != std::string::npos);
  CHECK(e.find("corrupted: crc32c of its 640000 bytes (image bytes " + std::to_string(at) + "..") != std::string::npos);
  const auto now = flat(*b, sb);
  CHECK((now.size() == before.size() && std::memcmp(now.data(), before.data(), now.size() * sizeof(float)) == 0));
  CHECK(error_of(image, *b, sb, {.step = 0, .digest = rf::ckpt::state_digest_of(*a, sa)}).empty());
}
