#pragma once
// RingLayout — the pure offset arithmetic of the ring all-reduce (and ring all-gather).
//
// The buffer of `count` elements is cut into W segments, as equal as possible: the first
// count % W segments get one element more. Each segment is cut into `pieces` pieces of at
// most `piece_elems` elements (a piece is the pipelining unit: piece p of every segment
// travels round the ring independently of piece p+1). Uneven sizes just give some pieces
// fewer (or zero) elements; zero-length transfers are skipped on both sides alike.
//
// Ring step k (0-based) of rank r, like Gloo's allreduce.cc `ring`:
//   reduce-scatter (k = 0..W-2): send segment (r-k) to r+1, receive segment (r-k-1) from
//     r-1 and add it to our own copy; after W-1 steps rank r owns the full sum of segment
//     (r+1) mod W.
//   all-gather (k = 0..W-2): send segment (r+1-k), receive segment (r-k) and copy it in.
// In NCCL's words step 0 is "send", reduce-scatter steps "recv-reduce-send", the last one
// "recv-reduce-copy-send", all-gather steps "recv-copy-send" and the last one "recv".
#include <cstddef>
#include <cstdint>

namespace rf::comm {

struct Span {
  size_t offset = 0;  // in elements
  size_t count = 0;
};

struct RingLayout {
  RingLayout(size_t count, int world, size_t piece_elems);

  size_t count;
  int world;
  size_t piece_elems;
  size_t pieces;  // per segment (at least 1)

  Span segment(int seg) const;
  Span piece(int seg, size_t p) const;  // clipped to the segment; may be empty
  int rs_send_segment(int rank, int k) const { return mod(rank - k); }
  int rs_recv_segment(int rank, int k) const { return mod(rank - k - 1); }
  int ag_send_segment(int rank, int k) const { return mod(rank + 1 - k); }
  int ag_recv_segment(int rank, int k) const { return mod(rank - k); }
  int owned_segment(int rank) const { return mod(rank + 1); }
  int mod(int x) const { return ((x % world) + world) % world; }
};

}  // namespace rf::comm
