#include <filesystem>

#include "base/str.h"
#include "core/data/data_error.h"
#include "core/data/dataset.h"
#include "core/data/idx.h"

namespace rf::data {
namespace {

// Fashion-MNIST's pixel mean and standard deviation over the training set (after /255).
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;
constexpr int kClasses = 10;

// Prefers the .gz file (as Debian ships it) and falls back to an uncompressed copy.
std::string pick(const std::string& dir, const std::string& stem) {
  const std::filesystem::path gz = std::filesystem::path(dir) / (stem + ".gz");
  const std::filesystem::path plain = std::filesystem::path(dir) / stem;
  std::error_code ec;
  if (std::filesystem::exists(gz, ec)) return gz.string();
  if (std::filesystem::exists(plain, ec)) return plain.string();
  throw DataError(rf::str(gz.string(), ": file not found (nor ", plain.string(),
                          "); is the dataset installed (Debian package dataset-fashion-mnist) and --data-dir right?"));
}

}  // namespace

Dataset load_fashion_mnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string images_path = pick(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = pick(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx_u8(images_path, 3);
  IdxArray labels = read_idx_u8(labels_path, 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(rf::str(labels_path, ": label count ", labels.dims[0], " does not match the image count ",
                            images.dims[0], " of ", images_path));
  }
  Dataset ds;
  ds.n = images.dims[0];
  ds.c = 1;
  ds.h = images.dims[1];
  ds.w = images.dims[2];
  ds.num_classes = kClasses;
  ds.labels.resize(static_cast<size_t>(ds.n));
  for (int64_t i = 0; i < ds.n; ++i) {
    const uint8_t y = labels.data[static_cast<size_t>(i)];
    if (y >= kClasses) {
      throw DataError(rf::str(labels_path, ": label ", int{y}, " of sample ", i, " (byte offset ", 8 + i,
                              ") is out of range [0, ", kClasses, ")"));
    }
    ds.labels[static_cast<size_t>(i)] = y;
  }
  // Same float32 operations, in the same order, as the PyTorch parity script:
  // (x / 255 - mean) / std.
  ds.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) {
    ds.images[i] = (static_cast<float>(images.data[i]) / 255.0f - kMean) / kStd;
  }
  return ds;
}

}  // namespace rf::data
