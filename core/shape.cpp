#include "core/shape.h"

#include "base/enforce.h"

namespace rf {

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > kMaxDims)
    throw InvalidInput(rf::str("a tensor has at most ", kMaxDims, " dimensions, got ", dims.size()));
  for (int64_t d : dims) {
    if (d < 0) throw InvalidInput(rf::str("negative dimension ", d, " in a shape"));
    dims_[ndim_++] = d;
  }
}

int64_t Shape::operator[](int i) const {
  const int j = i < 0 ? i + ndim_ : i;
  RF_ENFORCE(j >= 0 && j < ndim_, "dimension ", i, " out of range for shape ", this->str());
  return dims_[j];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim_ != o.ndim_) return false;
  for (int i = 0; i < ndim_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

}  // namespace rf
