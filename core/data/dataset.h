#pragma once
// Dataset — images as normalised float32 (n, c, h, w) row-major, one int32 label each.
// Loaders and the synthetic generator produce it; gather_batch copies a batch out of it
// in the order the sampler gives, so every rank builds the same samples for an index.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rf::data {

enum class Split { Train, Test };

struct Dataset {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int num_classes = 0;
  std::vector<float> images;    // n*c*h*w, normalised
  std::vector<int32_t> labels;  // n, each in [0, num_classes)

  int64_t sample_size() const { return c * h * w; }
};

// Fashion-MNIST from `dir`: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (the
// uncompressed names without .gz are accepted too). Pixels become
// (x/255 - 0.2860) / 0.3530. Throws DataError naming the file and the problem.
Dataset load_fashion_mnist(const std::string& dir, Split split);

// A learnable synthetic dataset for tests: every class has its own fixed pattern (from the
// seed), each sample is its class pattern plus noise. Deterministic in all arguments and
// independent of the platform (our own PRNG, no std distributions).
Dataset make_synthetic(int64_t n, int64_t c, int64_t h, int64_t w, int num_classes, uint64_t seed);

// Copies the samples `indices` (in that order) to images_out (indices.size() * c*h*w
// floats) and labels_out (indices.size()). An index outside [0, n) throws InvalidInput.
void gather_batch(const Dataset& ds, std::span<const int64_t> indices, float* images_out,
                  int32_t* labels_out);

}  // namespace rf::data
