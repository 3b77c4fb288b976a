#include "ddp/train_state.h"

#include <cstring>

#include "base/digest.h"
#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {
namespace {

constexpr char kMagic[8] = {'R', 'F', 'S', 'T', 'A', 'T', 'E', '1'};
constexpr size_t kHeader = 32;

uint64_t load_u64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One digest function for the live state and a staged image, so "staged == promised" and
// "replica a == replica b" are the same comparison.
std::string digest_of(int64_t step, size_t n_tensors, const std::vector<std::string>& names,
                      const std::vector<std::pair<const float*, size_t>>& data,
                      const std::vector<std::pair<std::string, int64_t>>& counters) {
  StateDigest d;
  d.update_u64(static_cast<uint64_t>(step));
  d.update_u64(n_tensors);
  for (size_t i = 0; i < n_tensors; ++i) {
    d.update_str(names[i]);
    d.update_u64(data[i].second);
    if (data[i].second) d.update(data[i].first, sizeof(float) * data[i].second);
  }
  d.update_u64(counters.size());
  for (const auto& [name, v] : counters) {
    d.update_str(name);
    d.update_u64(static_cast<uint64_t>(v));
  }
  return d.hex();
}

}  // namespace

TrainState::TrainState(nn::Module& model, optim::Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& [name, t] : model.named_parameters()) tensors_.push_back({name, t.data(), static_cast<size_t>(t.numel())});
  for (auto& [name, t] : optimizer.named_buffers()) tensors_.push_back({name, t.data(), static_cast<size_t>(t.numel())});
  image_bytes_ = kHeader + sizeof(int64_t) * optimizer.named_counters().size();
  for (const auto& t : tensors_) image_bytes_ += sizeof(float) * t.count;
}

std::string TrainState::digest() const {
  std::vector<std::string> names;
  std::vector<std::pair<const float*, size_t>> data;
  for (const auto& t : tensors_) {
    names.push_back(t.name);
    data.emplace_back(t.data, t.count);
  }
  return digest_of(step_, tensors_.size(), names, data, optimizer_.named_counters());
}

void TrainState::write_image(std::span<std::byte> out) const {
  if (out.size() != image_bytes_)
    throw InvalidInput(str("state image buffer holds ", out.size(), " bytes, the state needs ", image_bytes_));
  std::byte* p = out.data();
  std::memcpy(p, kMagic, 8);
  const uint64_t hdr[3] = {static_cast<uint64_t>(step_ + 1), tensors_.size(), optimizer_.named_counters().size()};
  std::memcpy(p + 8, hdr, sizeof hdr);
  p += kHeader;
  for (const auto& t : tensors_) {
    if (t.count) std::memcpy(p, t.data, sizeof(float) * t.count);
    p += sizeof(float) * t.count;
  }
  for (const auto& [name, v] : optimizer_.named_counters()) {
    std::memcpy(p, &v, sizeof v);
    p += sizeof v;
  }
}

void TrainState::restore_verified(std::span<const std::byte> image, const std::string& expected_digest) {
  if (image.size() != image_bytes_)
    throw InvalidInput(str("state image: ", image.size(), " bytes, this model's state has ", image_bytes_));
  const std::byte* p = image.data();
  if (std::memcmp(p, kMagic, 8) != 0) throw InvalidInput("state image: bad magic (not a ringfence state image)");
  const int64_t step = static_cast<int64_t>(load_u64(p + 8)) - 1;
  const auto counters_live = optimizer_.named_counters();
  if (load_u64(p + 16) != tensors_.size() || load_u64(p + 24) != counters_live.size())
    throw InvalidInput(str("state image: ", load_u64(p + 16), " tensors and ", load_u64(p + 24),
                           " counters, this model has ", tensors_.size(), " and ", counters_live.size()));
  // Digest the staged bytes in place before anything live is written (R6).
  std::vector<std::string> names;
  std::vector<std::pair<const float*, size_t>> data;
  const std::byte* q = p + kHeader;
  for (const auto& t : tensors_) {
    names.push_back(t.name);
    data.emplace_back(reinterpret_cast<const float*>(q), t.count);
    q += sizeof(float) * t.count;
  }
  std::vector<std::pair<std::string, int64_t>> counters;
  for (const auto& [name, v] : counters_live) {
    int64_t c;
    std::memcpy(&c, q, sizeof c);
    counters.emplace_back(name, c);
    q += sizeof c;
  }
  const std::string got = digest_of(step, tensors_.size(), names, data, counters);
  if (got != expected_digest)
    throw InvalidInput(str("state image of step ", step, ": digest ", got, " is not the promised ", expected_digest,
                           " (transfer damaged; live state left unchanged)"));
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].count) std::memcpy(tensors_[i].data, data[i].first, sizeof(float) * tensors_[i].count);
  for (const auto& [name, v] : counters) optimizer_.set_counter(name, v);
  step_ = step;
}

}  // namespace rf::ddp
