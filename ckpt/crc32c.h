#pragma once
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every tensor in a
// snapshot. Hardware (SSE4.2 crc32) where built for it; else software slice-by-8: eight
// bytes per step through eight 256-entry tables.
// crc32c("123456789") == 0xE3069283.
#include <cstddef>
#include <cstdint>
#include <string>

namespace rf::ckpt {

// Continues a running CRC: crc32c(b, crc32c(a)) == crc32c(a followed by b). Uses the CPU's
// crc32 instruction when built for SSE4.2 (x86-64 with -march=native), else the tables.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
// The table version, always available (the tests check both against a bitwise CRC).
uint32_t crc32c_software(const void* data, size_t bytes, uint32_t crc = 0);
bool crc32c_is_hardware();
// How a CRC is written in snapshot metadata: 8 lowercase hex digits.
std::string hex32(uint32_t v);

}  // namespace rf::ckpt
