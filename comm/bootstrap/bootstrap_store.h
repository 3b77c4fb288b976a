#pragma once
// BootstrapStore — where ranks of generation g publish and find each other's addresses
// (keys "g<gen>/addr/<rank>", so generations never mix). FileStore implements it for tests
// and benchmarks; the elastic layer's key-value store plugs in through an adapter in ddp/.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace rf::comm {

class BootstrapStore {
 public:
  virtual ~BootstrapStore() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // blocks until the key exists; throws rf::comm::TimedOut after `timeout`
  virtual std::vector<uint8_t> wait_get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

}  // namespace rf::comm
