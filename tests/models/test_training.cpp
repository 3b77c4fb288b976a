// A few training steps on synthetic data: the loss goes down, and two runs with the same
// seed end in the same state bit for bit (state_digest). Plus --init loading by name.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <unistd.h>

#include "base/error.h"
#include "base/str.h"
#include "ckpt/safetensors.h"
#include "ckpt/state.h"
#include "core/optim/sgd.h"
#include "core/state_digest.h"
#include "models/init_file.h"
#include "models/reference.h"
#include "models/train.h"
#include "models/train_setup.h"

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

TEST_CASE("--init: a file that does not fit changes nothing, and the message says what the file is") {
  const std::string path = temp_path("init-bad.safetensors");
  auto source = make_mlp(7);
  auto target = make_mlp(0);
  const std::string before = state_digest(*target);
  auto error_of = [&](nn::Module& m) -> std::string {
    try {
      load_parameters(m, path);
    } catch (const InvalidInput& e) {
      return e.what();
    }
    FAIL("load_parameters accepted " << path);
    return {};
  };

  SUBCASE("the first tensors fit, the last does not: none is copied") {
    ckpt::SafetensorsWriter w;
    for (auto& [name, t] : source->named_parameters()) {
      std::vector<int64_t> shape;
      for (int i = 0; i < t.dim(); ++i) shape.push_back(t.size(i));
      if (name == "5.bias") shape = {5};  // the last in file order (the writer keeps it)
      w.add(name, ckpt::DType::F32, shape, t.data());
    }
    w.write_file(path);
    const std::string m = error_of(*target);
    CHECK(m.find("'5.bias': shape is [5], expected [10]") != std::string::npos);
    CHECK(state_digest(*target) == before);  // 1.weight ... 5.weight were copied before
  }
  SUBCASE("a checkpoint: --resume-from continues it") {
    optim::SGD sgd(source->named_parameters(), {.lr = 0.1f, .momentum = 0.9f});
    std::vector<std::byte> image;
    ckpt::serialize_state(*source, sgd, {.model = "mlp", .step = 41, .optimizer = "sgd"}, image);
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
    const std::string m = error_of(*target);
    CHECK(m.find("unexpected tensor 'optim.1.weight.momentum_buffer'") != std::string::npos);
    CHECK(m.find(path + " is a ringfence checkpoint (model mlp, step 41): --resume-from continues it") !=
          std::string::npos);
    CHECK(state_digest(*target) == before);
  }
  SUBCASE("the other model's parameters: the message names the program they fit") {
    save_parameters(*make_cnn(3), path);
    TrainOptions o;
    o.model = ModelKind::MLP;
    o.init_file = path;
    try {
      build_model(o);
      FAIL("train_mlp --init took the CNN's parameters");
    } catch (const InvalidInput& e) {
      const std::string m = e.what();
      CHECK(m.find("missing '1.weight'") != std::string::npos);
      CHECK(m.find(path + " holds the parameters of the cnn (train_cnn --init)") != std::string::npos);
    }
  }
  std::remove(path.c_str());
}

TEST_CASE("a data set of another image size is an error naming the files, before training") {
  // It failed in the first forward pass as "matmul: inner sizes differ: [64, 1024] @ [512, 784]^T".
  const std::string dir = temp_path("data32");
  std::filesystem::create_directories(dir);
  auto idx = [&](const std::string& name, std::vector<uint32_t> dims) {
    std::vector<unsigned char> b = {0, 0, 8, static_cast<unsigned char>(dims.size())};
    size_t n = 1;
    for (uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
      n *= d;
    }
    b.resize(b.size() + n, 3);  // pixels 3, labels 3
    std::ofstream(dir + "/" + name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()),
                                                             static_cast<std::streamsize>(b.size()));
  };
  for (const char* split : {"train", "t10k"}) {
    idx(std::string(split) + "-images-idx3-ubyte", {4, 32, 32});
    idx(std::string(split) + "-labels-idx1-ubyte", {4});
  }
  auto error_of = [](auto load) -> std::string {
    try {
      load();
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "(no error)";
  };
  for (ModelKind kind : {ModelKind::MLP, ModelKind::CNN}) {
    TrainOptions o;
    o.model = kind;
    o.data_dir = dir;
    const std::string want = str("--data-dir ", dir, ": the training images are 1x32x32, the ", model_name(kind),
                                 " takes 1x28x28 (Fashion-MNIST)");
    CHECK(error_of([&] { load_train_set(o); }) == want);
    CHECK(error_of([&] { load_test_set(o); }).find(": the test images are 1x32x32") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
