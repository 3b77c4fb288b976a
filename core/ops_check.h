#pragma once
// Shape and device checks shared by the op implementations (not part of the public API).
#include "base/error.h"
#include "base/str.h"
#include "core/tensor.h"

namespace rf::detail {

inline void require_defined(const char* op, const Tensor& t, const char* what) {
  if (!t.defined()) throw InvalidInput(str(op, ": ", what, " is undefined"));
}

inline void require_dims(const char* op, const Tensor& t, int dims, const char* what) {
  require_defined(op, t, what);
  if (t.dim() != dims)
    throw InvalidInput(str(op, ": ", what, " must be ", dims, "-D, got shape ", t.shape().str()));
}

inline void require_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    throw InvalidInput(str(op, ": shapes differ: ", a.shape().str(), " vs ", b.shape().str()));
}

inline void require_same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (a.device() != b.device())
    throw InvalidInput(str(op, ": tensors on ", device_name(a.device()), " and ",
                           device_name(b.device())));
}

}  // namespace rf::detail
