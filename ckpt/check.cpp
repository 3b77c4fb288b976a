#include "ckpt/check.h"

#include <map>

#include "base/str.h"
#include "ckpt/format_error.h"

namespace rf::ckpt {
std::vector<Mismatch> compare_tensors(std::span<const TensorInfo> found, std::span<const ExpectedTensor> expected) {
  std::map<std::string, const TensorInfo*> by_name;
  for (const auto& t : found) by_name[t.name] = &t;
  std::vector<Mismatch> out;
  std::map<std::string, bool> wanted;
  for (const auto& e : expected) {
    wanted[e.name] = true;
    auto it = by_name.find(e.name);
    if (it == by_name.end()) {
      out.push_back({Mismatch::Kind::Missing, e.name,
                     rf::str("missing (expected ", dtype_name(e.dtype), " ", shape_str(e.shape), ")")});
      continue;
    }
    const TensorInfo& t = *it->second;
    if (t.dtype != e.dtype) {
      out.push_back({Mismatch::Kind::WrongDType, e.name,
                     rf::str("dtype is ", dtype_name(t.dtype), ", expected ", dtype_name(e.dtype))});
    }
    if (t.shape != e.shape) {
      out.push_back({Mismatch::Kind::WrongShape, e.name,
                     rf::str("shape is ", shape_str(t.shape), ", expected ", shape_str(e.shape))});
    }
  }
  for (const auto& t : found) {
    if (!wanted.count(t.name)) {
      out.push_back({Mismatch::Kind::Unexpected, t.name,
                     rf::str("unexpected (", dtype_name(t.dtype), " ", shape_str(t.shape), ")")});
    }
  }
  return out;
}

void check_tensors(const SafetensorsReader& r, std::span<const ExpectedTensor> expected, bool allow_unexpected) {
  std::string problems;
  size_t count = 0;
  for (const auto& m : compare_tensors(r.tensors(), expected)) {
    if (allow_unexpected && m.kind == Mismatch::Kind::Unexpected) continue;
    problems += rf::str(count ? "; " : "", "'", m.name, "' ", m.detail);
    ++count;
  }
  if (count) {
    throw MismatchError(r.source(), "", rf::str(count, " tensor", count == 1 ? "" : "s",
                                                " do not match the model: ", problems));
  }
}

}  // namespace rf::ckpt
