#include "comm/nccl/unique_id.h"

#include <algorithm>

#include "base/error.h"
#include "base/str.h"
#include "comm/errors.h"

namespace rf::comm::nccl {

namespace {

constexpr size_t kHeaderBytes = 8;

[[noreturn]] void bad_value(const std::string& key, uint64_t generation, int rank, const std::string& what) {
  CommErrorInfo i;
  i.rank = rank;
  i.collective = "bootstrap";
  i.generation = static_cast<int64_t>(generation);
  i.peer = 0;
  i.cause = rf::str("NCCL unique id under key '", key, "': ", what);
  throw PeerFailed(i);
}

}  // namespace

std::string unique_id_key(uint64_t generation) { return rf::str("nccl/uid/g", generation); }

std::vector<uint8_t> encode_unique_id(uint64_t generation, std::span<const uint8_t> id) {
  if (id.size() != kUniqueIdBytes) {
    throw rf::InvalidInput(rf::str("NCCL unique id of generation ", generation, ": ", id.size(),
                                   " bytes, expected ", kUniqueIdBytes));
  }
  std::vector<uint8_t> value(kHeaderBytes + kUniqueIdBytes);
  for (size_t b = 0; b < kHeaderBytes; ++b) value[b] = static_cast<uint8_t>(generation >> (8 * b));
  std::copy(id.begin(), id.end(), value.begin() + kHeaderBytes);
  return value;
}

UniqueId decode_unique_id(const std::string& key, uint64_t generation, const std::vector<uint8_t>& value, int rank) {
  if (value.size() != kHeaderBytes + kUniqueIdBytes) {
    bad_value(key, generation, rank,
              rf::str(value.size(), " bytes, expected ", kHeaderBytes + kUniqueIdBytes, " (generation + id)"));
  }
  uint64_t written = 0;
  for (size_t b = 0; b < kHeaderBytes; ++b) written |= uint64_t{value[b]} << (8 * b);
  if (written != generation) {
    bad_value(key, generation, rank, rf::str("written for generation ", written, ", not ", generation));
  }
  UniqueId id{};
  std::copy(value.begin() + kHeaderBytes, value.end(), id.begin());
  return id;
}

void publish_unique_id(BootstrapStore& store, uint64_t generation, std::span<const uint8_t> id) {
  store.set(unique_id_key(generation), encode_unique_id(generation, id));
}

UniqueId wait_unique_id(BootstrapStore& store, uint64_t generation, int rank, std::chrono::milliseconds timeout) {
  const std::string key = unique_id_key(generation);
  std::vector<uint8_t> value;
  try {
    value = store.wait_get(key, timeout);
  } catch (const TimedOut& e) {
    CommErrorInfo i = e.info();
    i.rank = rank;
    i.collective = "bootstrap";
    i.generation = static_cast<int64_t>(generation);
    i.peer = 0;
    throw TimedOut(i);
  }
  return decode_unique_id(key, generation, value, rank);
}

UniqueId exchange_unique_id(BootstrapStore& store, uint64_t generation, int rank, int world,
                            std::chrono::milliseconds timeout, const std::function<std::vector<uint8_t>()>& make_id) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw rf::InvalidInput(rf::str("NCCL unique id exchange: rank ", rank, " of world size ", world));
  }
  if (rank != 0) return wait_unique_id(store, generation, rank, timeout);
  const std::vector<uint8_t> id = make_id();
  publish_unique_id(store, generation, id);
  UniqueId out{};
  std::copy(id.begin(), id.end(), out.begin());  // size checked by publish_unique_id
  return out;
}

}  // namespace rf::comm::nccl
