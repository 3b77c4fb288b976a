#include <doctest/doctest.h>

#include <string>

#include "base/enforce.h"

TEST_CASE("RF_ENFORCE names the condition, the place and the message") {
  int world = 3;
  try {
    RF_ENFORCE(world == 4, "world size is ", world);
    FAIL("RF_ENFORCE did not throw");
  } catch (const rf::EnforceError& e) {
    std::string what = e.what();
    CHECK(what.find("world == 4") != std::string::npos);
    CHECK(what.find("test_enforce.cpp") != std::string::npos);
    CHECK(what.find("world size is 3") != std::string::npos);
  }
  CHECK_NOTHROW(RF_ENFORCE(world == 3));
}
