#include "ddp/elastic_store.h"

#include <algorithm>

#include "base/clock.h"
#include "base/str.h"
#include "comm/errors.h"

namespace rf::ddp {

void ElasticStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  client_.kv_set(generation_, key, std::string(value.begin(), value.end()));
}

std::vector<uint8_t> ElasticStore::wait_get(const std::string& key, std::chrono::milliseconds timeout) {
  comm::CommErrorInfo info;
  info.collective = "bootstrap";
  info.generation = static_cast<int64_t>(generation_);
  const TimePoint deadline = Clock::now() + timeout;
  while (true) {
    if (client_.seen_generation() > generation_) {
      info.cause = str("generation ", generation_, " was revoked while waiting for '", key, "'");
      throw comm::Aborted(info);
    }
    const Duration left = deadline - Clock::now();
    const Duration slice = std::min<Duration>(left, std::chrono::milliseconds(100));
    if (slice <= Duration::zero()) break;
    try {
      const std::string v = client_.kv_wait(generation_, key, slice);
      return {v.begin(), v.end()};
    } catch (const elastic::CallTimeout&) {
      // not there yet: check for revocation and wait again
    }
  }
  info.cause = str("key '", key, "' was not published within ", timeout.count(), " ms");
  throw comm::TimedOut(info);
}

}  // namespace rf::ddp
