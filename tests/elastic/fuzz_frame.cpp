// libFuzzer target: the coordinator's frame reader, envelope check and request decoder,
// i.e. everything a peer's bytes reach before the state machine. Any exception other than
// ProtocolError, any crash, leak or UB is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "elastic/frame.h"
#include "elastic/messages.h"

using namespace rf::elastic;

namespace {
void drain(FrameReader& r) {
  while (auto payload = r.next()) {
    try {
      decode_request(parse_message(*payload));
    } catch (const ProtocolError&) {
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* p = reinterpret_cast<const char*>(data);
  // 1. As a byte stream, fed in two pieces (incremental parsing) with a small bound.
  FrameReader r(4096);
  const size_t cut = size ? data[0] % (size + 1) : 0;
  try {
    r.feed(p, cut);
    drain(r);
    r.feed(p + cut, size - cut);
    drain(r);
  } catch (const ProtocolError&) {
  }
  // 2. As one payload, to reach the JSON decoder without needing a valid length.
  try {
    decode_request(parse_message(std::string(p, size)));
  } catch (const ProtocolError&) {
  }
  return 0;
}
