#include "ckpt/dtype.h"

#include <array>
#include <utility>

namespace rf::ckpt {
namespace {

struct Entry {
  DType type;
  std::string_view name;
  size_t size;
};

constexpr std::array<Entry, 13> kTypes = {{{DType::F64, "F64", 8},
                                           {DType::F32, "F32", 4},
                                           {DType::F16, "F16", 2},
                                           {DType::BF16, "BF16", 2},
                                           {DType::I64, "I64", 8},
                                           {DType::I32, "I32", 4},
                                           {DType::I16, "I16", 2},
                                           {DType::I8, "I8", 1},
                                           {DType::U64, "U64", 8},
                                           {DType::U32, "U32", 4},
                                           {DType::U16, "U16", 2},
                                           {DType::U8, "U8", 1},
                                           {DType::BOOL, "BOOL", 1}}};

const Entry& entry(DType t) {
  for (const auto& e : kTypes)
    if (e.type == t) return e;
  return kTypes[1];  // unreachable: every enumerator is in the table
}

}  // namespace

std::string_view dtype_name(DType t) { return entry(t).name; }
size_t dtype_size(DType t) { return entry(t).size; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& e : kTypes)
    if (e.name == name) return e.type;
  return std::nullopt;
}

}  // namespace rf::ckpt
