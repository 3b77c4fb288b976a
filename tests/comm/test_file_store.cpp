#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "base/clock.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"

using namespace rf::comm;

namespace {
std::string temp_dir() {
  std::string t = (std::filesystem::temp_directory_path() / "rf-store-XXXXXX").string();
  REQUIRE(mkdtemp(t.data()) != nullptr);
  return t;
}
}  // namespace

TEST_CASE("FileStore: set then wait_get, keys with slashes, generations apart") {
  const std::string dir = temp_dir();
  FileStore s(dir);
  s.set("g1/addr/0", {1, 2, 3});
  s.set("g2/addr/0", {9});
  CHECK(s.wait_get("g1/addr/0", std::chrono::milliseconds(100)) == std::vector<uint8_t>{1, 2, 3});
  CHECK(s.wait_get("g2/addr/0", std::chrono::milliseconds(100)) == std::vector<uint8_t>{9});
  s.set("g1/addr/0", {});  // overwrite, also with nothing
  CHECK(s.wait_get("g1/addr/0", std::chrono::milliseconds(100)).empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("FileStore: wait_get blocks until another writer sets the key") {
  const std::string dir = temp_dir();
  FileStore reader(dir), writer(dir);
  std::thread t([&] { writer.set("late", {42}); });
  CHECK(reader.wait_get("late", std::chrono::seconds(10)) == std::vector<uint8_t>{42});
  t.join();
  std::filesystem::remove_all(dir);
}

TEST_CASE("FileStore: a missing key times out with TimedOut naming it") {
  const std::string dir = temp_dir();
  FileStore s(dir);
  const auto t0 = rf::Clock::now();
  try {
    s.wait_get("g4/addr/3", std::chrono::milliseconds(50));
    FAIL("no timeout");
  } catch (const TimedOut& e) {
    CHECK(std::string(e.what()).find("g4/addr/3") != std::string::npos);
    CHECK(rf::seconds_since(t0) >= 0.05);
  }
  std::filesystem::remove_all(dir);
}
