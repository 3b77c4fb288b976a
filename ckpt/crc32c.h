#pragma once
// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every tensor in a
// snapshot. Software slice-by-8: eight bytes per step through eight 256-entry tables.
// crc32c("123456789") == 0xE3069283.
#include <cstddef>
#include <cstdint>

namespace rf::ckpt {

// Continues a running CRC: crc32c(b, crc32c(a)) == crc32c(a followed by b).
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace rf::ckpt
