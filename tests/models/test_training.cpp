// A few training steps on synthetic data: the loss goes down, and two runs with the same
// seed end in the same state bit for bit (state_digest). Plus --init loading by name.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <unistd.h>

#include "base/error.h"
#include "core/state_digest.h"
#include "models/init_file.h"
#include "models/reference.h"
#include "models/train_loop.h"

using namespace rf;
using namespace rf::models;

namespace {
TrainOptions small(ModelKind kind, int64_t steps) {
  TrainOptions o;
  o.model = kind;
  o.synthetic = 512;
  o.batch = 32;
  o.max_steps = steps;
  o.log_interval = 0;
  o.lr = 0.02f;
  return o;
}

float mean(const std::vector<float>& v, size_t from, size_t to) {
  return std::accumulate(v.begin() + from, v.begin() + to, 0.0f) / static_cast<float>(to - from);
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("rf_models_" + std::to_string(::getpid()) + "_" + name)).string();
}
}  // namespace

TEST_CASE("MLP: loss decreases on synthetic data and two runs are bitwise identical") {
  std::ostringstream log;
  const TrainResult a = train(small(ModelKind::MLP, 16), log);
  const TrainResult b = train(small(ModelKind::MLP, 16), log);
  REQUIRE(a.losses.size() == 16);
  CHECK(mean(a.losses, 12, 16) < 0.7f * mean(a.losses, 0, 4));
  CHECK(a.state_digest == b.state_digest);
  CHECK(a.losses == b.losses);
  TrainOptions other = small(ModelKind::MLP, 16);
  other.seed = 1;
  CHECK(train(other, log).state_digest != a.state_digest);
}

TEST_CASE("CNN: loss decreases on synthetic data and two runs are bitwise identical") {
  std::ostringstream log;
  const TrainResult a = train(small(ModelKind::CNN, 10), log);
  const TrainResult b = train(small(ModelKind::CNN, 10), log);
  CHECK(mean(a.losses, 7, 10) < mean(a.losses, 0, 3));
  CHECK(a.state_digest == b.state_digest);
}

TEST_CASE("CNN parameter names and shapes match PyTorch's Sequential") {
  auto m = make_cnn(0);
  std::vector<std::string> names;
  for (auto& [n, t] : m->named_parameters()) names.push_back(n + t.shape().str());
  CHECK(names == std::vector<std::string>{"0.weight[16, 1, 5, 5]", "0.bias[16]",
                                          "3.weight[32, 16, 5, 5]", "3.bias[32]",
                                          "7.weight[128, 1568]", "7.bias[128]",
                                          "9.weight[10, 128]", "9.bias[10]"});
}

TEST_CASE("--init: parameters load by name; a mismatch names what is wrong") {
  const std::string path = temp_path("init.safetensors");
  auto source = make_mlp(7);
  save_parameters(*source, path);
  auto target = make_mlp(0);
  CHECK(state_digest(*target) != state_digest(*source));
  load_parameters(*target, path);
  CHECK(state_digest(*target) == state_digest(*source));

  auto cnn = make_cnn(0);
  try {
    load_parameters(*cnn, path);
    FAIL("loading MLP weights into the CNN must fail");
  } catch (const InvalidInput& e) {
    const std::string m = e.what();
    CHECK(m.find("missing '0.weight'") != std::string::npos);
    CHECK(m.find("unexpected tensor '1.weight'") != std::string::npos);
  }
  CHECK_THROWS(load_parameters(*target, temp_path("does-not-exist.safetensors")));
  std::remove(path.c_str());
}
