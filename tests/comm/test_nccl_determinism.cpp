// NCCL's deterministic mode (comm/nccl/determinism.h): what it sets, and that a setting the
// user made is kept and named.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "comm/nccl/determinism.h"

using namespace rf::comm::nccl;

TEST_CASE("deterministic mode fixes the algorithm and protocol and turns NVLS and CollNet off") {
  const auto none = [](const char*) -> const char* { return nullptr; };
  const auto c = determinism_env(true, none);
  std::map<std::string, std::string> set;
  for (const EnvChoice& e : c) {
    CHECK_FALSE(e.kept);
    set[e.name] = e.value;
  }
  CHECK(set == std::map<std::string, std::string>{
                   {"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}, {"NCCL_NVLS_ENABLE", "0"}, {"NCCL_COLLNET_ENABLE", "0"}});
  CHECK(describe_determinism(true, c).find("NCCL_ALGO=Ring") != std::string::npos);
  CHECK(describe_determinism(true, c).find("4 channels") != std::string::npos);
}

TEST_CASE("deterministic mode keeps what the user set, and says the order may vary") {
  const auto user = [](const char* n) -> const char* { return std::string(n) == "NCCL_ALGO" ? "Tree" : nullptr; };
  const auto c = determinism_env(true, user);
  bool seen = false;
  for (const EnvChoice& e : c)
    if (e.name == "NCCL_ALGO") seen = e.kept && e.existing == "Tree";
  CHECK(seen);
  const std::string d = describe_determinism(true, c);
  CHECK_MESSAGE(d.find("NCCL_ALGO=Tree [set by the user: the order may vary]") != std::string::npos, d);
}

TEST_CASE("off: nothing is set") {
  CHECK(determinism_env(false, [](const char*) -> const char* { return nullptr; }).empty());
  CHECK(describe_determinism(false, {}).find("not deterministic") == 0);
}

TEST_CASE("settings that change the summation order are named: variables and NCCL's configuration files") {
  const std::map<std::string, std::string> env{{"NCCL_MAX_CTAS", "2"}, {"NCCL_BUFFSIZE", "8388608"},
                                               {"NCCL_TUNER_PLUGIN", "libmytuner.so"}, {"HOME", "/home/u"},
                                               {"NCCL_DEBUG", "INFO"}};
  const auto getenv = [&](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  const auto exists = [](const std::string& p) { return p == "/home/u/.nccl.conf"; };
  std::map<std::string, std::string> named;
  for (const OrderRisk& r : order_risks(true, getenv, exists)) named[r.name] = r.value;
  CHECK(named == std::map<std::string, std::string>{{"NCCL_MAX_CTAS", "2"}, {"NCCL_BUFFSIZE", "8388608"},
                                                    {"NCCL_TUNER_PLUGIN", "libmytuner.so"}, {"/home/u/.nccl.conf", ""}});
  const std::string w = describe_order_risk({"NCCL_MAX_CTAS", "2", "the channel count"});
  CHECK_MESSAGE(w.find("NCCL_MAX_CTAS=2 may change the channel count") == 0, w);
  CHECK(w.find("every rank, replacements included, runs with the same setting") != std::string::npos);
  CHECK(order_risks(false, getenv, exists).empty());  // not deterministic: nothing is promised
}

TEST_CASE("nothing set, no configuration file: no risk") {
  CHECK(order_risks(true, [](const char*) -> const char* { return nullptr; }, [](const std::string&) { return false; }).empty());
}
