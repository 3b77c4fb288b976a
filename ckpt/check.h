#pragma once
// Comparing a file's tensors with what a model expects, and saying exactly what differs:
// every missing, unexpected, wrong-shape and wrong-dtype tensor, all at once (a user
// fixing an --init file wants the whole list, not one error per run).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/safetensors_reader.h"

namespace rf::ckpt {

struct ExpectedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

struct Mismatch {
  enum class Kind { Missing, Unexpected, WrongShape, WrongDType };
  Kind kind;
  std::string name;
  std::string detail;  // e.g. "shape is [10, 512], expected [10, 784]"
};

// In the order of `expected`, then unexpected tensors in file order.
std::vector<Mismatch> compare_tensors(std::span<const TensorInfo> found, std::span<const ExpectedTensor> expected);

// Throws MismatchError listing every mismatch ("; "-separated) when there is any.
// allow_unexpected: extra tensors in the file are fine (e.g. optimizer buffers when only
// parameters are loaded).
void check_tensors(const SafetensorsReader& r, std::span<const ExpectedTensor> expected, bool allow_unexpected = false);

}  // namespace rf::ckpt
