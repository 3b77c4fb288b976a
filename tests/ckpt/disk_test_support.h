#pragma once
// What the disk-checkpoint tests share: a temporary directory removed at the end, a tiny
// model + SGD whose state a test sets to a known value (so each checkpoint is
// distinguishable), the metadata of step s, and the listing of a directory.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/state.h"
#include "core/nn/layers.h"
#include "core/nn/sequential.h"
#include "core/optim/sgd.h"
#include "core/random.h"

namespace rf::ckpt::testing {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/rf_ckpt_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (std::filesystem::path(path) / name).string(); }
};

inline std::shared_ptr<nn::Sequential> tiny_model(uint64_t seed, int64_t hidden = 6) {
  Generator g(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->emplace<nn::Linear>(4, hidden, g).emplace<nn::ReLU>().emplace<nn::Linear>(hidden, 3, g);
  return m;
}

struct Trainee {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> sgd;
  explicit Trainee(uint64_t seed = 3, int64_t hidden = 6)
      : model(tiny_model(seed, hidden)),
        sgd(std::make_unique<optim::SGD>(model->named_parameters(), optim::SgdOptions{.lr = 0.1f, .momentum = 0.9f})) {}
  void set(float v) {
    for (auto& [n, t] : model->named_parameters())
      for (auto& x : t.values()) x = v;
  }
  std::string digest() const { return state_digest_of(*model, *sgd); }
};

inline SnapshotMeta meta_at(int64_t step) {
  return {.model = "tiny", .step = step, .optimizer = "sgd", .optimizer_hparams = R"({"lr":0.1})"};
}

inline std::vector<int64_t> steps_in(const std::string& dir) {
  std::vector<int64_t> out;
  for (auto& f : list_checkpoints(dir)) out.push_back(f.step);
  return out;
}

inline std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace rf::ckpt::testing
