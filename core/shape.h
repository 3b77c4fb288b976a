#pragma once
// Shape of a contiguous row-major tensor: 0 to 4 dimensions (a 0-d shape is a scalar).
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace rf {

class Shape {
 public:
  static constexpr int kMaxDims = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);  // throws rf::InvalidInput on >4 or negative

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const;  // negative i counts from the back
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[128, 784]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

}  // namespace rf
