#pragma once
// Frames of the coordinator protocol: a 4-byte big-endian length, then that many bytes of
// JSON, an object with "v" (kProtocolVersion) and "type". Lengths are bounded
// (kMaxFrameBytes) so a peer can never make us allocate without limit; a frame that
// breaks any rule throws ProtocolError, and the server answers it with an error reply
// and closes the connection.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "elastic/errors.h"

namespace rf::elastic {

inline constexpr int kProtocolVersion = 1;
inline constexpr uint32_t kMaxFrameBytes = 1u << 20;

// The bytes on the wire for one message. Adds "v" when absent.
std::string encode_frame(nlohmann::json message);

// Incremental reader: feed() what the socket gave, then next() until it returns nullopt.
// The buffer never holds more than one partial frame plus what one read brought.
class FrameReader {
 public:
  explicit FrameReader(uint32_t max_frame = kMaxFrameBytes) : max_frame_(max_frame) {}
  void feed(const char* data, size_t n) { buf_.append(data, n); }
  // The next complete payload, or nullopt if incomplete. Throws ProtocolError when the
  // announced length is zero or above the bound (checked as soon as 4 bytes are here).
  std::optional<std::string> next();
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  uint32_t max_frame_;
  std::string buf_;
  size_t pos_ = 0;
};

// Parses and checks the envelope: a JSON object, "v" == kProtocolVersion, "type" a
// non-empty string. Throws ProtocolError naming what is wrong.
nlohmann::json parse_message(std::string_view payload);

// Typed field access; each throws ProtocolError naming the field and the expectation.
int64_t get_int(const nlohmann::json& m, const char* key, int64_t min, int64_t max);
std::optional<int64_t> get_opt_int(const nlohmann::json& m, const char* key, int64_t min, int64_t max);
bool get_bool(const nlohmann::json& m, const char* key);
std::string get_str(const nlohmann::json& m, const char* key, size_t max_len);
std::optional<std::string> get_opt_str(const nlohmann::json& m, const char* key, size_t max_len);

}  // namespace rf::elastic
