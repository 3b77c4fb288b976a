#pragma once
// StepTag — the 64-bit UCX tag of every message of a collective (docs/protocol.md "tag").
//
//   bit 63            48 47                      24 23     16  15  14           0
//       [ generation 16 ][        step 24          ][ op  8  ][ r ][  chunk 15   ]
//
// * generation: the membership epoch g. The transport of g is new (its own UCP worker),
//   so an older generation cannot reach it at all; the bits check it a second time.
// * step: the training step s (0 .. 2^24-1).
// * op: which collective of the step; 255 (kInternalOp) is the communicator's own (the
//   connection's hello, farewells), so callers get 0..254. The trainer numbers its
//   buckets and its own collectives in one place, ddp/op_plan.h.
// * chunk: the message within the collective (ring step x sub-chunk, round, ...).
// * r (reply): set on the single-copy path's "done" message that the receiver of chunk c
//   sends back to its sender (ucx/single_copy.h); it keeps that reply apart from the data
//   of chunk c travelling the other way (W = 2: both neighbours are the same rank).
// Receives always match all 64 bits, so a message is only delivered into the collective
// (and the chunk) it was sent for. Values that do not fit are rejected, never truncated.
//
// On the wire the tag is keyed (TagKey): a message carries SipHash-2-4(K_g, tag), K_g a
// 128-bit secret of the job and the generation, derived from the job token
// (elastic/auth.h data_plane_key). Whoever reaches a worker's UCX endpoint without the
// token cannot name a receive: its messages match none, so not a byte of them lands in a
// collective, a state transfer or the connection's hello (UCX keeps an unmatched eager
// message in the generation's worker until that worker goes, and never fetches an
// unmatched rendezvous payload).
#include <cstdint>
#include <string>

#include "base/siphash.h"

namespace rf::comm {

struct StepTag {
  uint64_t generation = 0;
  uint64_t step = 0;
  uint32_t op = 0;
  uint32_t chunk = 0;
  bool reply = false;

  static constexpr int kGenerationBits = 16;
  static constexpr int kStepBits = 24;
  static constexpr int kOpBits = 8;
  static constexpr int kChunkBits = 15;
  static constexpr int kReplyBit = kChunkBits;  // bit 15
  static constexpr uint64_t kMaxGeneration = (uint64_t{1} << kGenerationBits) - 1;
  static constexpr uint64_t kMaxStep = (uint64_t{1} << kStepBits) - 1;
  static constexpr uint32_t kMaxOp = (1u << kOpBits) - 1;
  static constexpr uint32_t kMaxChunk = (1u << kChunkBits) - 1;
  static constexpr uint32_t kInternalOp = kMaxOp;  // reserved, see above
  static constexpr uint32_t kMaxUserOp = kMaxOp - 1;

  // Throws rf::InvalidInput naming the field that does not fit.
  uint64_t encode() const;
  static StepTag decode(uint64_t bits);
  std::string str() const;  // "g=3 s=812 op=1 chunk 5" (" reply" appended for a reply)
  bool operator==(const StepTag&) const = default;
};

// The key of one generation's tags; disabled (the plain tag on the wire) without a job
// token: the single-machine runs that have no coordinator.
struct TagKey {
  bool enabled = false;
  SipKey key;
  uint64_t wire(uint64_t tag) const { return enabled ? siphash24_u64(key, tag) : tag; }
};

}  // namespace rf::comm
