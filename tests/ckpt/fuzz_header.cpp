// libFuzzer target: any byte string handed to the safetensors reader must either parse
// (and then every tensor's bytes lie inside the input) or throw FormatError — never crash,
// read out of bounds, hang, or throw anything else. Built with clang++ by fuzz.cmake.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(data[i]);
  try {
    auto r = rf::ckpt::SafetensorsReader::from_bytes(std::move(bytes), "fuzz");
    uint64_t total = 0;
    for (const auto& t : r.tensors()) {
      auto b = r.bytes(t);  // ASan checks that every view is inside the input
      if (!b.empty()) total += std::to_integer<uint8_t>(b[0]) + std::to_integer<uint8_t>(b[b.size() - 1]);
    }
    (void)r.state_digest();
    if (total == UINT64_MAX) return 1;  // keeps the reads from being optimised away
  } catch (const rf::ckpt::FormatError&) {
    // the expected outcome for malformed input
  }
  return 0;
}
