#pragma once
// The NCCL unique id of one generation, exchanged through the BootstrapStore
// (docs/design.md, "Backends"). NCCL forms a communicator from an opaque 128-byte
// ncclUniqueId that one rank makes (ncclGetUniqueId) and every rank passes to
// ncclCommInitRankConfig. Every generation gets a new communicator and so a new id,
// published under a key that names the generation: "nccl/uid/g<generation>".
//
// The value in the store is the generation (8 bytes, little-endian) followed by the id:
// the generation is checked again on read, so an id of another generation is never
// taken, even when something wrote it under the wrong key. Pure (no NCCL): the 128 bytes
// are opaque here; only comm/nccl/nccl_communicator.cpp turns them into an ncclUniqueId.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "comm/bootstrap/bootstrap_store.h"

namespace rf::comm::nccl {

inline constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using UniqueId = std::array<uint8_t, kUniqueIdBytes>;

// "nccl/uid/g<generation>"
std::string unique_id_key(uint64_t generation);

// The store's value for (generation, id): 8 + 128 bytes. Throws rf::InvalidInput when `id`
// is not exactly kUniqueIdBytes long, naming the size.
std::vector<uint8_t> encode_unique_id(uint64_t generation, std::span<const uint8_t> id);
// The id in `value`, read under `key` for `generation`. A value of the wrong size or of
// another generation throws PeerFailed naming rank 0 (the publisher), the key and what
// was wrong, with `rank` and `generation` in the error's info.
UniqueId decode_unique_id(const std::string& key, uint64_t generation, const std::vector<uint8_t>& value, int rank);

// Rank 0: publishes `id` for `generation`. Throws rf::InvalidInput for a bad size.
void publish_unique_id(BootstrapStore& store, uint64_t generation, std::span<const uint8_t> id);
// Ranks other than 0: waits up to `timeout` for generation's id. Throws TimedOut (as the
// UCX backend does for a missing address: collective "bootstrap", peer 0, the rank and
// generation in the info) when it is not published in time, PeerFailed for a bad value.
UniqueId wait_unique_id(BootstrapStore& store, uint64_t generation, int rank, std::chrono::milliseconds timeout);

// The whole exchange for one rank: rank 0 calls make_id (ncclGetUniqueId in the shell)
// and publishes its result; every other rank waits for it. Returns the id on every rank.
// Throws rf::InvalidInput for a rank outside [0, world) or a make_id result of the wrong
// size.
UniqueId exchange_unique_id(BootstrapStore& store, uint64_t generation, int rank, int world,
                            std::chrono::milliseconds timeout, const std::function<std::vector<uint8_t>()>& make_id);

}  // namespace rf::comm::nccl
