#include "elastic/kv_store.h"

#include "base/error.h"
#include "base/str.h"

namespace rf::elastic {

void KvStore::set(uint64_t generation, const std::string& key, std::string value) {
  Key k{generation, key};
  auto it = map_.find(k);
  const size_t old = it == map_.end() ? 0 : key.size() + it->second.size();
  const size_t next = bytes_ - old + key.size() + value.size();
  if (next > max_bytes_)
    throw rf::InvalidInput(rf::str("key-value store full: setting '", key, "' would hold ", next,
                                   " bytes, the limit is ", max_bytes_));
  bytes_ = next;
  map_[std::move(k)] = std::move(value);
}

std::optional<std::string> KvStore::get(uint64_t generation, const std::string& key) const {
  auto it = map_.find(Key{generation, key});
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

std::pair<bool, std::optional<std::string>> KvStore::compare_and_set(uint64_t generation, const std::string& key,
                                                                     const std::optional<std::string>& expected,
                                                                     std::string desired) {
  auto current = get(generation, key);
  if (current != expected) return {false, current};
  set(generation, key, desired);
  return {true, std::move(desired)};
}

void KvStore::drop_generations_below(uint64_t keep_from) {
  for (auto it = map_.begin(); it != map_.end();) {
    if (it->first.first != 0 && it->first.first < keep_from) {
      bytes_ -= it->first.second.size() + it->second.size();
      it = map_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace rf::elastic
