#include <doctest/doctest.h>

#include "base/error.h"
#include "elastic/kv_store.h"
#include "elastic/token.h"
#include "elastic/wire.h"

using namespace rf::elastic;

TEST_CASE("kv store: generation-scoped keys, compare-and-set, dropping old generations") {
  KvStore kv(1000);
  kv.set(3, "addr/0", "A");
  CHECK(kv.get(3, "addr/0") == "A");
  CHECK_FALSE(kv.get(4, "addr/0"));  // another generation's scope
  auto [swapped, v] = kv.compare_and_set(3, "leader", std::nullopt, "r0");
  CHECK(swapped);
  auto [swapped2, v2] = kv.compare_and_set(3, "leader", std::nullopt, "r1");
  CHECK_FALSE(swapped2);
  CHECK(v2 == "r0");
  CHECK(kv.compare_and_set(3, "leader", std::string("r0"), "r2").first);
  kv.set(0, "job", "forever");
  kv.set(5, "addr/0", "B");
  kv.drop_generations_below(4);
  CHECK_FALSE(kv.get(3, "addr/0"));
  CHECK(kv.get(0, "job") == "forever");
  CHECK(kv.get(5, "addr/0") == "B");
  CHECK_THROWS_AS(kv.set(5, "big", std::string(2000, 'x')), rf::InvalidInput);
  CHECK(kv.get(5, "addr/0") == "B");
}

TEST_CASE("tokens are random and compared exactly") {
  auto a = random_token(), b = random_token();
  CHECK(a.size() == 32);
  CHECK(a != b);
  CHECK(token_equal(a, a));
  CHECK_FALSE(token_equal(a, b));
  CHECK_FALSE(token_equal(a, a.substr(0, 31)));
  CHECK_FALSE(token_equal("", a));
}

TEST_CASE("hex and host:port parsing") {
  std::string bytes("\x00\xff\x10z", 4);
  CHECK(hex_decode(hex_encode(bytes)) == bytes);
  CHECK_THROWS_AS(hex_decode("abc"), ProtocolError);
  CHECK_THROWS_AS(hex_decode("zz"), ProtocolError);
  CHECK(parse_host_port("127.0.0.1:29500") == std::pair<std::string, int>("127.0.0.1", 29500));
  CHECK_THROWS_AS(parse_host_port("localhost"), rf::InvalidInput);
  CHECK_THROWS_AS(parse_host_port("h:99999"), rf::InvalidInput);
  CHECK_THROWS_AS(parse_host_port("h:12x"), rf::InvalidInput);
}
