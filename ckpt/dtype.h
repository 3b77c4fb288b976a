#pragma once
// Element types of a safetensors file, named as the format names them ("F32", "I64", ...).
#include <cstddef>
#include <optional>
#include <string_view>

namespace rf::ckpt {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL };

std::string_view dtype_name(DType t);
size_t dtype_size(DType t);  // bytes per element
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace rf::ckpt
