#include "elastic/frame.h"

#include "base/str.h"

namespace rf::elastic {

using nlohmann::json;

std::string encode_frame(json message) {
  if (!message.contains("v")) message["v"] = kProtocolVersion;
  // Invalid UTF-8 (never from a parsed frame, but maybe in an error text) is replaced,
  // not thrown: building a reply must not fail.
  std::string body = message.dump(-1, ' ', false, json::error_handler_t::replace);
  if (body.size() > kMaxFrameBytes)
    throw ProtocolError(rf::str("message of ", body.size(), " bytes exceeds the frame limit of ",
                                kMaxFrameBytes));
  const auto n = static_cast<uint32_t>(body.size());
  std::string out(4, '\0');
  out[0] = static_cast<char>(n >> 24);
  out[1] = static_cast<char>(n >> 16);
  out[2] = static_cast<char>(n >> 8);
  out[3] = static_cast<char>(n);
  return out + body;
}

std::optional<std::string> FrameReader::next() {
  if (buf_.size() - pos_ < 4) return std::nullopt;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
  const uint32_t n = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  if (n == 0) throw ProtocolError("frame of length 0");
  if (n > max_frame_)
    throw ProtocolError(rf::str("frame of ", n, " bytes exceeds the limit of ", max_frame_));
  if (buf_.size() - pos_ - 4 < n) return std::nullopt;
  std::string payload = buf_.substr(pos_ + 4, n);
  pos_ += 4 + n;
  // Compact once the consumed prefix dominates, so the buffer stays bounded.
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return payload;
}

json parse_message(std::string_view payload) {
  json m = json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded()) throw ProtocolError("frame is not valid JSON");
  if (!m.is_object()) throw ProtocolError("frame is not a JSON object");
  auto v = m.find("v");
  if (v == m.end() || !v->is_number_integer())
    throw ProtocolError("frame has no integer version field 'v'");
  if (v->get<int64_t>() != kProtocolVersion)
    throw ProtocolError(rf::str("protocol version ", v->dump(), " is not supported (this is version ",
                                kProtocolVersion, ")"));
  auto t = m.find("type");
  if (t == m.end() || !t->is_string() || t->get_ref<const std::string&>().empty())
    throw ProtocolError("frame has no string field 'type'");
  return m;
}

namespace {
const json& field(const json& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end()) throw ProtocolError(rf::str("missing field '", key, "'"));
  return *it;
}
}  // namespace

int64_t get_int(const json& m, const char* key, int64_t min, int64_t max) {
  const json& f = field(m, key);
  int64_t x = 0;
  if (f.is_number_integer()) {
    // Unsigned values above INT64_MAX would wrap; reject them explicitly.
    if (f.is_number_unsigned() && f.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw ProtocolError(rf::str("field '", key, "' is out of range"));
    x = f.get<int64_t>();
  } else {
    throw ProtocolError(rf::str("field '", key, "' must be an integer, got ", f.type_name()));
  }
  if (x < min || x > max)
    throw ProtocolError(rf::str("field '", key, "' = ", x, " is outside [", min, ", ", max, "]"));
  return x;
}

std::optional<int64_t> get_opt_int(const json& m, const char* key, int64_t min, int64_t max) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return std::nullopt;
  return get_int(m, key, min, max);
}

bool get_bool(const json& m, const char* key) {
  const json& f = field(m, key);
  if (!f.is_boolean()) throw ProtocolError(rf::str("field '", key, "' must be a boolean, got ", f.type_name()));
  return f.get<bool>();
}

std::string get_str(const json& m, const char* key, size_t max_len) {
  const json& f = field(m, key);
  if (!f.is_string()) throw ProtocolError(rf::str("field '", key, "' must be a string, got ", f.type_name()));
  const auto& s = f.get_ref<const std::string&>();
  if (s.size() > max_len)
    throw ProtocolError(rf::str("field '", key, "' is ", s.size(), " bytes, more than ", max_len));
  return s;
}

std::optional<std::string> get_opt_str(const json& m, const char* key, size_t max_len) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return std::nullopt;
  return get_str(m, key, max_len);
}

}  // namespace rf::elastic
