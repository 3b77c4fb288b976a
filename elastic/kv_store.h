#pragma once
// The coordinator's key-value store, used to exchange transport addresses
// (docs/protocol.md step 5). Keys are scoped by generation: (g, key). Generation 0 is job-wide
// and never dropped; scopes of generations older than the previous one are dropped as
// the job moves on, so a worker of g can never read an address published for g-2.
// Pure data structure; waiting with a deadline is the server's job (it retries get()).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace rf::elastic {

class KvStore {
 public:
  explicit KvStore(size_t max_bytes = 64u << 20) : max_bytes_(max_bytes) {}

  // Throws rf::InvalidInput when the store would exceed max_bytes.
  void set(uint64_t generation, const std::string& key, std::string value);
  std::optional<std::string> get(uint64_t generation, const std::string& key) const;
  // Sets `desired` only if the current value equals `expected` (nullopt: absent).
  // Returns whether it swapped and the value now stored.
  std::pair<bool, std::optional<std::string>> compare_and_set(uint64_t generation, const std::string& key,
                                                              const std::optional<std::string>& expected,
                                                              std::string desired);
  // Drops every scope with 0 < g < keep_from.
  void drop_generations_below(uint64_t keep_from);
  size_t size() const { return map_.size(); }
  size_t bytes() const { return bytes_; }

 private:
  using Key = std::pair<uint64_t, std::string>;
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::map<Key, std::string> map_;
};

}  // namespace rf::elastic
