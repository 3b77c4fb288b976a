#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

#include "base/digest.h"
#include "base/error.h"
#include "core/data/data.h"

namespace {
const char* kFashionDir = "/usr/share/datasets/fashion-mnist";
}

TEST_CASE("the real Fashion-MNIST loads with the right counts, shapes and first labels") {
  // scripts/setup installs dataset-fashion-mnist; its absence is a set-up failure here.
  REQUIRE_MESSAGE(std::filesystem::exists(std::string(kFashionDir) + "/train-images-idx3-ubyte.gz"),
                  "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)");
  auto train = rf::data::load_fashion_mnist(kFashionDir, rf::data::Split::Train);
  CHECK(train.n == 60000);
  CHECK(train.c == 1);
  CHECK(train.h == 28);
  CHECK(train.w == 28);
  CHECK(train.num_classes == 10);
  CHECK(train.images.size() == 60000u * 784u);
  REQUIRE(train.labels.size() == 60000u);
  CHECK(train.labels[0] == 9);
  CHECK(train.labels[3] == 3);
  std::vector<int> counts(10, 0);
  for (int32_t y : train.labels) counts[static_cast<size_t>(y)]++;
  for (int c : counts) CHECK(c == 6000);
  // The normalisation makes the training set's mean about 0 and its std about 1.
  double sum = 0, sq = 0;
  for (float x : train.images) {
    sum += x;
    sq += double{x} * x;
  }
  const double mean = sum / static_cast<double>(train.images.size());
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(std::sqrt(sq / static_cast<double>(train.images.size()) - mean * mean) - 1.0) < 0.02);

  auto test = rf::data::load_fashion_mnist(kFashionDir, rf::data::Split::Test);
  CHECK(test.n == 10000);
  REQUIRE(test.labels.size() == 10000u);
  CHECK(test.labels[0] == 9);
  CHECK(test.labels[1] == 2);
}

TEST_CASE("synthetic data is deterministic in its seed and shaped as asked") {
  auto a = rf::data::make_synthetic(200, 2, 3, 4, 5, 7);
  auto b = rf::data::make_synthetic(200, 2, 3, 4, 5, 7);
  auto c = rf::data::make_synthetic(200, 2, 3, 4, 5, 8);
  CHECK(a.images.size() == 200u * 24u);
  CHECK(a.labels.size() == 200u);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  CHECK(a.images != c.images);
  for (int32_t y : a.labels) REQUIRE((y >= 0 && y < 5));
  CHECK_THROWS_AS(rf::data::make_synthetic(0, 1, 1, 1, 2, 0), rf::InvalidInput);
}

TEST_CASE("synthetic data is learnable: class means from one half classify the other half") {
  const int k = 10;
  auto ds = rf::data::make_synthetic(2000, 1, 8, 8, k, 3);
  const int64_t d = ds.sample_size();
  std::vector<double> means(static_cast<size_t>(k * d), 0.0);
  std::vector<int> counts(k, 0);
  for (int64_t i = 0; i < 1000; ++i) {
    const int y = ds.labels[static_cast<size_t>(i)];
    counts[static_cast<size_t>(y)]++;
    for (int64_t j = 0; j < d; ++j) means[static_cast<size_t>(y * d + j)] += ds.images[static_cast<size_t>(i * d + j)];
  }
  for (int y = 0; y < k; ++y) {
    REQUIRE(counts[static_cast<size_t>(y)] > 0);
    for (int64_t j = 0; j < d; ++j) means[static_cast<size_t>(y * d + j)] /= counts[static_cast<size_t>(y)];
  }
  int correct = 0;
  for (int64_t i = 1000; i < 2000; ++i) {
    int best = -1;
    double best_dist = 1e300;
    for (int y = 0; y < k; ++y) {
      double dist = 0;
      for (int64_t j = 0; j < d; ++j) {
        const double diff = ds.images[static_cast<size_t>(i * d + j)] - means[static_cast<size_t>(y * d + j)];
        dist += diff * diff;
      }
      if (dist < best_dist) best_dist = dist, best = y;
    }
    correct += best == ds.labels[static_cast<size_t>(i)];
  }
  CHECK(correct > 900);  // far above the 10 % of guessing
}

TEST_CASE("gather_batch copies samples in the given order and rejects bad indices") {
  auto ds = rf::data::make_synthetic(10, 1, 2, 3, 4, 1);
  const std::vector<int64_t> idx = {7, 0, 7, 3};
  std::vector<float> x(idx.size() * 6);
  std::vector<int32_t> y(idx.size());
  rf::data::gather_batch(ds, idx, x.data(), y.data());
  for (size_t i = 0; i < idx.size(); ++i) {
    CHECK(y[i] == ds.labels[static_cast<size_t>(idx[i])]);
    for (size_t j = 0; j < 6; ++j) CHECK(x[i * 6 + j] == ds.images[static_cast<size_t>(idx[i]) * 6 + j]);
  }
  const std::vector<int64_t> bad = {1, 10};
  CHECK_THROWS_AS(rf::data::gather_batch(ds, bad, x.data(), y.data()), rf::InvalidInput);
  const std::vector<int64_t> neg = {-1};
  CHECK_THROWS_AS(rf::data::gather_batch(ds, neg, x.data(), y.data()), rf::InvalidInput);
}
