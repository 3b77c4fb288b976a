// Frames and request decoding: truncated, oversized and garbage input is refused with a
// ProtocolError naming what is wrong, never a crash.
#include <doctest/doctest.h>

#include "elastic/frame.h"
#include "elastic/messages.h"

using namespace rf::elastic;
using nlohmann::json;

namespace {
std::string raw(uint32_t n, const std::string& body) {
  std::string s(4, '\0');
  s[0] = static_cast<char>(n >> 24), s[1] = static_cast<char>(n >> 16), s[2] = static_cast<char>(n >> 8),
  s[3] = static_cast<char>(n);
  return s + body;
}
std::string what_of(const std::string& payload) {
  try {
    decode_request(parse_message(payload));
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("round trip, byte by byte") {
  Heartbeat beat;
  beat.generation = 3;
  beat.step = 41;
  std::string wire = encode_frame(encode_request(beat)) + encode_frame({{"type", "leave"}});  // an older worker's leave
  FrameReader r;
  std::vector<std::string> got;
  for (char c : wire) {
    r.feed(&c, 1);
    while (auto p = r.next()) got.push_back(*p);
  }
  REQUIRE(got.size() == 2);
  auto req = decode_request(parse_message(got[0]));
  REQUIRE(std::holds_alternative<Heartbeat>(req));
  CHECK(std::get<Heartbeat>(req).step == 41);
  CHECK_FALSE(std::get<Heartbeat>(req).loss);  // optional: absent before the first step
  REQUIRE(std::holds_alternative<Leave>(decode_request(parse_message(got[1]))));
  CHECK_FALSE(std::get<Leave>(decode_request(parse_message(got[1]))).step);  // an older worker's leave
  CHECK(std::get<Leave>(decode_request(parse_message(R"({"v":1,"type":"leave","step":14})"))).step == 14);
}

TEST_CASE("encoding never throws on invalid UTF-8 (it is replaced)") {
  std::string wire = encode_frame({{"type", "error"}, {"error", std::string("bad \xff byte")}});
  FrameReader r;
  r.feed(wire.data(), wire.size());
  auto p = r.next();
  REQUIRE(p);
  CHECK(parse_message(*p)["error"].get<std::string>().find("bad") == 0);
}

TEST_CASE("truncated frames are incomplete, not errors") {
  std::string wire = encode_frame({{"type", "status"}});
  FrameReader r;
  r.feed(wire.data(), wire.size() - 1);
  CHECK_FALSE(r.next());
  r.feed(wire.data() + wire.size() - 1, 1);
  CHECK(r.next());
  FrameReader r2;
  r2.feed(wire.data(), 2);  // not even a full length
  CHECK_FALSE(r2.next());
}

TEST_CASE("oversized and zero lengths are refused as soon as the length is known") {
  FrameReader r;
  std::string big = raw(kMaxFrameBytes + 1, "");
  r.feed(big.data(), big.size());
  CHECK_THROWS_WITH_AS(r.next(), doctest::Contains("exceeds the limit"), ProtocolError);
  FrameReader z;
  std::string zero = raw(0, "");
  z.feed(zero.data(), zero.size());
  CHECK_THROWS_AS(z.next(), ProtocolError);
  CHECK_THROWS_AS(encode_frame({{"type", "kv_set"}, {"value", std::string(kMaxFrameBytes, 'a')}}), ProtocolError);
}

TEST_CASE("garbage payloads") {
  CHECK(what_of("\x01\x02garbage") == "frame is not valid JSON");
  CHECK(what_of("[1,2]") == "frame is not a JSON object");
  CHECK(what_of(R"({"type":"status"})").find("version") != std::string::npos);
  CHECK(what_of(R"({"v":99,"type":"status"})").find("not supported") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":7})").find("'type'") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"launch_missiles"})").find("unknown request type") != std::string::npos);
}

TEST_CASE("every field is typed and bounded") {
  CHECK(what_of(R"({"v":1,"type":"heartbeat","generation":"3","step":1})").find("'generation' must be an integer") !=
        std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"heartbeat","generation":-1,"step":1})").find("outside") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"heartbeat","generation":18446744073709551615,"step":1})").find("range") !=
        std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"heartbeat","step":1})").find("missing field 'generation'") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"heartbeat","generation":1,"step":1,"loss":-1})").find("'loss'") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"heartbeat","generation":1,"step":1,"samples_per_s":"fast"})")
            .find("'samples_per_s'") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"report","round":1,"has_state":1,"step":1,"digest":""})").find("boolean") !=
        std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"report","round":1,"has_state":false,"step":5,"digest":""})")
            .find("without state") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"hello","nonce":"0123456789abcdef","role":"admin"})").find("role") !=
        std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"hello","nonce":"0123456789abcdef","role":"member","slot":-4,"incarnation":0})")
            .find("'slot'") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"hello","nonce":"0123","role":"member","slot":0,"incarnation":0})")
            .find("'nonce'") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"auth"})").find("'mac'") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"leave","step":"14"})").find("'step' must be an integer") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"leave","step":-2})").find("outside") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"phase","generation":1,"phase":"nap","ms":1})").find("phase") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"phase","generation":1,"phase":"verify","ms":-1})").find("ms") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"injected","generation":1,"step":3,"spec":""})").find("'spec' must not be empty") !=
        std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"injected","generation":1,"spec":"kill:rank=0:step=3"})").find("missing field 'step'") !=
        std::string::npos);
  const auto inj = decode_request(parse_message(R"({"v":1,"type":"injected","generation":2,"step":3,"spec":"hang:rank=1:step=3"})"));
  REQUIRE(std::holds_alternative<Injected>(inj));
  CHECK(std::get<Injected>(inj).spec == "hang:rank=1:step=3");
  CHECK(std::get<Injected>(inj).step == 3);
  CHECK(std::get<Injected>(inj).generation == 2);
  json long_key = {{"v", 1}, {"type", "kv_get"}, {"generation", 1}, {"key", std::string(300, 'k')}};
  CHECK(what_of(long_key.dump()).find("more than 256") != std::string::npos);
  // Errors say which request they belong to.
  CHECK(what_of(R"({"v":1,"type":"ready","generation":1})").rfind("request 'ready'", 0) == 0);
}

// The literal JSON here tests the wire format itself (an older worker's encoding, malformed
// input); what the client's encoders send round-trips in test_requests.cpp.
TEST_CASE("a failure report's kind: absent is comm, gpu_stuck typed, an unknown word refused") {
  auto failure = [](const std::string& extra) {
    return std::get<FailureReport>(decode_request(
        parse_message(R"({"v":1,"type":"failure","generation":4,"step":9,"peer_slot":1,"cause":"x")" + extra + "}")));
  };
  CHECK(failure("").kind == FailureKind::comm);  // an older worker's encoding
  CHECK(failure(R"(,"kind":"comm")").kind == FailureKind::comm);
  const FailureReport f = failure(R"(,"kind":"gpu_stuck")");
  CHECK(f.kind == FailureKind::gpu_stuck);
  CHECK(f.peer_slot == 1);
  CHECK(what_of(R"({"v":1,"type":"failure","generation":4,"step":9,"cause":"x","kind":"gpu"})")
            .find("field 'kind' = 'gpu' is not comm or gpu_stuck") != std::string::npos);
  CHECK(what_of(R"({"v":1,"type":"failure","generation":4,"step":9,"cause":"x","kind":3})").find("'kind'") !=
        std::string::npos);
}

TEST_CASE("a report's comm_generation: absent is 0") {
  auto report = [](const std::string& extra) {
    return std::get<Report>(decode_request(parse_message(
        R"({"v":1,"type":"report","round":5,"has_state":true,"step":9,"digest":"d")" + extra + "}")));
  };
  CHECK(report("").comm_generation == 0u);
  CHECK(report(R"(,"comm_generation":4)").comm_generation == 4u);
  const Report none = std::get<Report>(decode_request(parse_message(
      R"({"v":1,"type":"report","round":0,"has_state":false,"step":-1,"digest":"","comm_generation":3})")));
  CHECK(none.comm_generation == 3u);  // said with or without state
  CHECK(what_of(R"({"v":1,"type":"report","round":5,"has_state":true,"step":9,"digest":"d","comm_generation":-1})")
            .find("comm_generation") != std::string::npos);
}
