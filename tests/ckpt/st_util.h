#pragma once
// Helpers shared by the ckpt tests: a sample state, hand-made files, error capture.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"

namespace st_test {

using Bytes = std::vector<std::byte>;

// A small state with every dtype the snapshots use, including odd sizes.
struct SampleState {
  std::vector<float> w = std::vector<float>(3 * 5);
  std::vector<float> b = std::vector<float>(5);
  std::vector<double> m = std::vector<double>(7);
  std::vector<int64_t> steps = {-3, 0, 1LL << 40};
  std::vector<uint64_t> counters = {0, 1, ~0ULL};
  SampleState() {
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 1.0f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = -static_cast<float>(i) / 3.0f;
    for (size_t i = 0; i < m.size(); ++i) m[i] = 1e-300 * static_cast<double>(i + 1);
  }
  rf::ckpt::SafetensorsWriter writer() const {
    rf::ckpt::SafetensorsWriter wr;
    wr.add("0.weight", rf::ckpt::DType::F32, {5, 3}, w.data());
    wr.add("0.bias", rf::ckpt::DType::F32, {5}, b.data());
    wr.add("opt.momentum", rf::ckpt::DType::F64, {7}, m.data());
    wr.add("steps", rf::ckpt::DType::I64, {3}, steps.data());
    wr.add("counters", rf::ckpt::DType::U64, {1, 3}, counters.data());
    wr.set_metadata("model", "tiny");
    return wr;
  }
};

// A file made by hand: 8-byte length, the header text as given, then the data bytes.
inline Bytes raw_file(const std::string& header, size_t data_bytes, uint64_t header_len = UINT64_MAX) {
  const uint64_t n = header_len == UINT64_MAX ? header.size() : header_len;
  Bytes out(8 + header.size() + data_bytes, std::byte{0});
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

// Parses `bytes` as a reader would and returns the FormatError's message ("" if none).
inline std::string read_error(const Bytes& bytes) {
  try {
    rf::ckpt::SafetensorsReader::from_bytes(bytes, "test.safetensors");
  } catch (const rf::ckpt::FormatError& e) {
    return e.what();
  }
  return "";
}

inline bool has(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return true;
  MESSAGE("message was: '", s, "' (expected to contain: '", part, "')");
  return false;
}

}  // namespace st_test
