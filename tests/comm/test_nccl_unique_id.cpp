// The NCCL unique-id exchange per generation (comm/nccl/unique_id.h), on an in-memory store
// and on FileStore. No NCCL: the id is 128 opaque bytes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/nccl/unique_id.h"

using namespace rf::comm;
using namespace rf::comm::nccl;
using namespace std::chrono_literals;

namespace {

// A BootstrapStore in memory, shared by threads playing the ranks.
class MemoryStore : public BootstrapStore {
 public:
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    {
      std::lock_guard lk(mu_);
      values_[key] = value;
    }
    cv_.notify_all();
  }
  std::vector<uint8_t> wait_get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return values_.count(key) > 0; })) {
      CommErrorInfo i;
      i.collective = "bootstrap";
      i.cause = rf::str("key '", key, "' not set within ", timeout.count(), " ms");
      throw TimedOut(i);
    }
    return values_.at(key);
  }
  std::vector<std::string> keys() {
    std::lock_guard lk(mu_);
    std::vector<std::string> k;
    for (const auto& [key, v] : values_) k.push_back(key);
    return k;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

std::vector<uint8_t> id_bytes(uint8_t seed, size_t n = kUniqueIdBytes) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + 7 * k);
  return v;
}

bool same(const UniqueId& a, const std::vector<uint8_t>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "rf-nccl-uid-XXXXXX").string();
  REQUIRE(mkdtemp(t.data()) != nullptr);
  return t;
}

}  // namespace

TEST_CASE("the unique id's key names the generation, and generations have different keys") {
  CHECK(unique_id_key(0) == "nccl/uid/g0");
  CHECK(unique_id_key(17) == "nccl/uid/g17");
  CHECK(unique_id_key(1) != unique_id_key(11));
}

TEST_CASE("every rank gets rank 0's id; rank 0 makes it once and the others never call make_id") {
  MemoryStore store;
  constexpr int kWorld = 4;
  const std::vector<uint8_t> id = id_bytes(3);
  std::vector<UniqueId> got(kWorld);
  std::atomic<int> made{0};
  std::vector<std::thread> ranks;
  for (int r = kWorld - 1; r >= 0; --r) {  // waiters first: they must wait, not fail
    ranks.emplace_back([&, r] {
      got[r] = exchange_unique_id(store, 5, r, kWorld, 5000ms, [&] {
        ++made;
        return id;
      });
    });
  }
  for (auto& t : ranks) t.join();
  CHECK(made == 1);
  for (int r = 0; r < kWorld; ++r) CHECK_MESSAGE(same(got[r], id), "rank ", r);
  CHECK(store.keys() == std::vector<std::string>{"nccl/uid/g5"});
}

TEST_CASE("a waiting rank never takes another generation's id") {
  MemoryStore store;
  publish_unique_id(store, 4, id_bytes(1));
  // Generation 5's id is not there yet: generation 4's is not taken instead.
  const auto t0 = rf::Clock::now();
  try {
    (void)wait_unique_id(store, 5, 2, 60ms);
    FAIL("no TimedOut");
  } catch (const TimedOut& e) {
    CHECK(e.generation() == 5);
    CHECK(e.info().rank == 2);
    CHECK(e.peer() == 0);
    CHECK(e.info().collective == "bootstrap");
    CHECK_MESSAGE(has(e.what(), "nccl/uid/g5"), e.what());
    CHECK_MESSAGE(has(e.what(), "g=5"), e.what());
  }
  CHECK(rf::Clock::now() - t0 >= 60ms);
  publish_unique_id(store, 5, id_bytes(2));
  CHECK(same(wait_unique_id(store, 5, 2, 1000ms), id_bytes(2)));
  CHECK(same(wait_unique_id(store, 4, 2, 1000ms), id_bytes(1)));
}

TEST_CASE("an id written for another generation under this generation's key is refused") {
  MemoryStore store;
  store.set(unique_id_key(6), encode_unique_id(3, id_bytes(9)));
  try {
    (void)wait_unique_id(store, 6, 1, 1000ms);
    FAIL("no PeerFailed");
  } catch (const PeerFailed& e) {
    CHECK(e.peer() == 0);
    CHECK(e.generation() == 6);
    CHECK_MESSAGE(has(e.what(), "written for generation 3, not 6"), e.what());
  }
}

TEST_CASE("bad sizes are refused: publishing, making and reading") {
  MemoryStore store;
  auto invalid = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const rf::InvalidInput& e) {
      return e.what();
    }
    return "(no rf::InvalidInput)";
  };
  const std::string short_id = invalid([&] { publish_unique_id(store, 1, id_bytes(0, 127)); });
  CHECK_MESSAGE(has(short_id, "127 bytes, expected 128"), short_id);
  CHECK(has(invalid([&] { publish_unique_id(store, 1, id_bytes(0, 129)); }), "129 bytes"));
  CHECK(has(invalid([&] { (void)exchange_unique_id(store, 1, 0, 2, 100ms, [] { return id_bytes(0, 16); }); }),
            "16 bytes"));
  CHECK(store.keys().empty());  // nothing half-published
  CHECK(has(invalid([&] { (void)exchange_unique_id(store, 1, 2, 2, 100ms, [] { return id_bytes(0); }); }),
            "rank 2 of world size 2"));
  store.set(unique_id_key(1), std::vector<uint8_t>(100, 0));
  try {
    (void)wait_unique_id(store, 1, 1, 1000ms);
    FAIL("no PeerFailed");
  } catch (const PeerFailed& e) {
    CHECK_MESSAGE(has(e.what(), "100 bytes, expected 136"), e.what());
  }
}

TEST_CASE("the exchange through FileStore: rank 0 publishes, a rank in another thread waits") {
  FileStore store(temp_dir());
  const std::vector<uint8_t> id = id_bytes(42);
  UniqueId waited{};
  std::thread waiter([&] { waited = exchange_unique_id(store, 9, 1, 2, 5000ms, [] { return id_bytes(0); }); });
  std::this_thread::sleep_for(20ms);
  const UniqueId made = exchange_unique_id(store, 9, 0, 2, 5000ms, [&] { return id; });
  waiter.join();
  CHECK(same(made, id));
  CHECK(same(waited, id));
  CHECK(std::filesystem::exists(store.dir() + "/nccl%2Fuid%2Fg9"));
  // Generation 10 was never published: its waiters time out naming it.
  CHECK_THROWS_AS((void)exchange_unique_id(store, 10, 1, 2, 30ms, [] { return id_bytes(0); }), TimedOut);
}
