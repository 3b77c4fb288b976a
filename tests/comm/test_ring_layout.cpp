#include <doctest/doctest.h>

#include <vector>

#include "comm/ring_layout.h"

using rf::comm::RingLayout;
using rf::comm::Span;

TEST_CASE("segments tile the buffer, sizes differ by at most one") {
  for (size_t count : {0, 1, 2, 7, 13, 64, 1000, 4099}) {
    for (int w = 1; w <= 8; ++w) {
      RingLayout l(count, w, 3);
      size_t next = 0, lo = count, hi = 0;
      for (int s = 0; s < w; ++s) {
        const Span sp = l.segment(s);
        CHECK(sp.offset == next);
        next += sp.count;
        lo = std::min(lo, sp.count);
        hi = std::max(hi, sp.count);
        // Pieces tile the segment.
        size_t in_seg = 0;
        for (size_t p = 0; p < l.pieces; ++p) {
          const Span pc = l.piece(s, p);
          CHECK(pc.offset == sp.offset + in_seg);
          CHECK(pc.count <= 3);
          in_seg += pc.count;
        }
        CHECK(in_seg == sp.count);
      }
      CHECK(next == count);
      CHECK(hi - lo <= 1);
    }
  }
}

TEST_CASE("the ring schedule: every rank receives what its left neighbour sends, owns one segment") {
  for (int w = 2; w <= 8; ++w) {
    RingLayout l(100, w, 10);
    for (int r = 0; r < w; ++r) {
      const int left = l.mod(r - 1);
      for (int k = 0; k < w - 1; ++k) {
        CHECK(l.rs_recv_segment(r, k) == l.rs_send_segment(left, k));
        CHECK(l.ag_recv_segment(r, k) == l.ag_send_segment(left, k));
      }
      // After reduce-scatter, the segment received last is the owned one, and the
      // all-gather starts by sending it.
      CHECK(l.rs_recv_segment(r, w - 2) == l.owned_segment(r));
      CHECK(l.ag_send_segment(r, 0) == l.owned_segment(r));
      // All-gather receives every segment except the owned one, each once.
      std::vector<int> seen(w, 0);
      for (int k = 0; k < w - 1; ++k) ++seen[l.ag_recv_segment(r, k)];
      for (int s = 0; s < w; ++s) CHECK(seen[s] == (s == l.owned_segment(r) ? 0 : 1));
    }
  }
}

TEST_CASE("a segment reduced in step k is the one sent in step k+1 (recv-reduce-send)") {
  RingLayout l(1000, 5, 7);
  for (int r = 0; r < 5; ++r)
    for (int k = 0; k + 1 < 4; ++k) CHECK(l.rs_recv_segment(r, k) == l.rs_send_segment(r, k + 1));
}
