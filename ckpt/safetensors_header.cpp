#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/str.h"
#include "ckpt/crc32c.h"
#include "ckpt/format_error.h"
#include "ckpt/safetensors_header.h"

namespace rf::ckpt {
namespace {

using nlohmann::json;

// Legitimate headers nest at most 3 deep: top object > entry object > shape array > dim.
constexpr int kMaxDepth = 3;

// Observes the parser to catch what the DOM cannot show afterwards: nlohmann keeps the last
// of duplicate keys silently, and a hostile header could nest arrays a million deep.
struct ParseWatch {
  std::string duplicate;       // first duplicate key seen, with its context
  bool too_deep = false;
  std::set<std::string> names;   // keys of the top-level object
  std::set<std::string> fields;  // keys of the current entry (or of __metadata__)
  std::string current;           // the top-level key whose value is being parsed
};

uint64_t load_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<uint64_t>(p[i]);
  return v;
}

// a * b, or UINT64_MAX on overflow (then no byte count can match it).
uint64_t mul_sat(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}

TensorInfo parse_entry(const std::string& source, const std::string& name, const json& v, uint64_t data_size) {
  auto fail = [&](const std::string& problem) -> FormatError { return FormatError(source, name, problem); };
  if (!v.is_object()) throw fail(rf::str("entry is a JSON ", v.type_name(), ", expected an object"));
  for (const auto& [key, _] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") throw fail(rf::str("unexpected field '", key, "'"));
  }
  TensorInfo t;
  t.name = name;
  auto dt = v.find("dtype");
  if (dt == v.end()) throw fail("missing field 'dtype'");
  if (!dt->is_string()) throw fail(rf::str("'dtype' is a JSON ", dt->type_name(), ", expected a string"));
  auto parsed = parse_dtype(dt->get_ref<const std::string&>());
  if (!parsed) throw fail(rf::str("unknown dtype '", dt->get_ref<const std::string&>(), "'"));
  t.dtype = *parsed;

  auto sh = v.find("shape");
  if (sh == v.end()) throw fail("missing field 'shape'");
  if (!sh->is_array()) throw fail(rf::str("'shape' is a JSON ", sh->type_name(), ", expected an array"));
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned()) throw fail(rf::str("'shape' has element ", d.dump(), ", expected a non-negative integer"));
    const uint64_t x = d.get<uint64_t>();
    if (x > static_cast<uint64_t>(INT64_MAX)) throw fail(rf::str("'shape' dimension ", x, " is too large"));
    t.shape.push_back(static_cast<int64_t>(x));
    numel = mul_sat(numel, x);
  }

  auto off = v.find("data_offsets");
  if (off == v.end()) throw fail("missing field 'data_offsets'");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
    throw fail(rf::str("'data_offsets' is ", off->dump(), ", expected [begin, end] of non-negative integers"));
  }
  t.begin = (*off)[0].get<uint64_t>();
  t.end = (*off)[1].get<uint64_t>();
  if (t.begin > t.end) throw fail(rf::str("data_offsets [", t.begin, ", ", t.end, "] end before they begin"));
  if (t.end > data_size) {
    throw fail(rf::str("data_offsets [", t.begin, ", ", t.end, "] run past the data section of ", data_size,
                       " bytes (truncated: a write cut short, e.g. by a full disk)"));
  }
  const uint64_t need = mul_sat(numel, dtype_size(t.dtype));
  if (need != t.nbytes()) {
    throw fail(rf::str("shape ", shape_str(t.shape), " of ", dtype_name(t.dtype), " needs ",
                       need == UINT64_MAX ? std::string("more than 2^64") : std::to_string(need),
                       " bytes but data_offsets [", t.begin, ", ", t.end, "] hold ", t.nbytes()));
  }
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Header parse_header(std::span<const std::byte> file, const std::string& source) {
  if (file.size() < 8) {
    throw FormatError(source, "", rf::str("file is ", file.size(), " bytes, shorter than the 8-byte header length"));
  }
  const uint64_t n = load_le64(file.data());
  const uint64_t after = file.size() - 8;
  if (n == 0) throw FormatError(source, "", "header length (bytes 0-7) is 0");
  if (n > kMaxHeaderBytes) {
    throw FormatError(source, "", rf::str("header length ", n, " (bytes 0-7) is over the limit of ", kMaxHeaderBytes));
  }
  if (n > after) {
    throw FormatError(source, "", rf::str("header length ", n, " (bytes 0-7) exceeds the ", after,
                                          " bytes that follow: truncated file or wrong header length"));
  }
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  // JSON never contains a NUL byte, but nlohmann stops reading at one and accepts what came
  // before: a header length that is too long (running into zero bytes) must not pass.
  for (uint64_t i = 0; i < n; ++i) {
    if (text[i] == '\0') {
      throw FormatError(source, "", rf::str("header (bytes 8-", 8 + n, ") has a NUL byte at byte ", 8 + i,
                                            ": wrong header length or damaged header"));
    }
  }

  ParseWatch w;
  json::parser_callback_t cb = [&w](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > kMaxDepth) {
      w.too_deep = true;
      return false;  // discard: do not build deep structures
    }
    if (ev == json::parse_event_t::object_start && depth == 1) w.fields.clear();
    if (ev == json::parse_event_t::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (depth == 1) {
        w.current = k;
        if (!w.names.insert(k).second && w.duplicate.empty()) w.duplicate = rf::str("duplicate tensor name '", k, "'");
      } else if (depth == 2) {
        if (!w.fields.insert(k).second && w.duplicate.empty()) {
          w.duplicate = rf::str("duplicate key '", k, "' in the entry of '", w.current, "'");
        }
      }
    }
    return true;
  };
  json h;
  try {
    h = json::parse(text, text + n, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    throw FormatError(source, "", rf::str("header (bytes 8-", 8 + n, ") is not valid JSON: ", e.what()));
  }
  if (w.too_deep) throw FormatError(source, "", rf::str("header nests deeper than ", kMaxDepth, " levels"));
  if (!w.duplicate.empty()) throw FormatError(source, "", w.duplicate);
  if (!h.is_object()) throw FormatError(source, "", rf::str("header is a JSON ", h.type_name(), ", expected an object"));

  Header out;
  out.data_start = 8 + n;
  const uint64_t data_size = after - n;
  for (const auto& [key, v] : h.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) throw FormatError(source, "", rf::str("__metadata__ is a JSON ", v.type_name(), ", expected an object"));
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) {
          throw FormatError(source, "", rf::str("__metadata__ value of '", mk, "' is a JSON ", mv.type_name(),
                                                ", expected a string"));
        }
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (key.empty()) throw FormatError(source, "", "a tensor has an empty name");
    out.tensors.push_back(parse_entry(source, key, v, data_size));
  }

  // The tensors must tile the data section: sorted by offset, each starts where the
  // previous one ended, the first at 0 and the last at its end.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : out.tensors) {
    if (t.begin < expect) {
      throw FormatError(source, t.name, rf::str("data_offsets [", t.begin, ", ", t.end, "] overlap tensor '",
                                                prev->name, "' [", prev->begin, ", ", prev->end, "]"));
    }
    if (t.begin > expect) {
      throw FormatError(source, t.name, rf::str("bytes [", expect, ", ", t.begin,
                                                ") of the data section before it belong to no tensor"));
    }
    expect = t.end;
    prev = &t;
  }
  if (expect != data_size) {
    throw FormatError(source, "", rf::str("the data section is ", data_size, " bytes but the tensors cover ", expect,
                                          expect < data_size ? " (trailing bytes)"
                                                             : " (truncated: a write cut short, e.g. by a full disk)"));
  }
  return out;
}

uint32_t metadata_crc(const std::map<std::string, std::string>& metadata) {
  uint32_t crc = 0;
  const char nul = 0;
  for (const auto& [k, v] : metadata) {
    if (k == kCrcKey || k == kDigestKey || k == kMetaCrcKey) continue;
    crc = crc32c(k.data(), k.size(), crc);
    crc = crc32c(&nul, 1, crc);
    crc = crc32c(v.data(), v.size(), crc);
    crc = crc32c(&nul, 1, crc);
  }
  return crc;
}

void digest_tensor_framing(rf::StateDigest& d, const std::string& name, DType dtype, std::span<const int64_t> shape,
                           size_t bytes) {
  d.update_str(name);
  d.update_str(std::string(dtype_name(dtype)));
  d.update_u64(shape.size());
  for (int64_t x : shape) d.update_u64(static_cast<uint64_t>(x));
  d.update_u64(bytes);
}

void digest_tensor(rf::StateDigest& d, const std::string& name, DType dtype, std::span<const int64_t> shape,
                   const void* data, size_t bytes) {
  digest_tensor_framing(d, name, dtype, shape, bytes);
  // A zero-sized tensor may have no storage (nullptr): memcpy(dst, nullptr, 0) inside the
  // digest is undefined behaviour, so it is skipped.
  if (bytes > 0) d.update(data, bytes);
}

std::string shape_str(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace rf::ckpt
