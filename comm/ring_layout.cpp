#include "comm/ring_layout.h"

#include <algorithm>

#include "base/enforce.h"

namespace rf::comm {

RingLayout::RingLayout(size_t count_, int world_, size_t piece_elems_)
    : count(count_), world(world_), piece_elems(piece_elems_) {
  RF_ENFORCE(world >= 1, "world size ", world);
  RF_ENFORCE(piece_elems >= 1, "piece size 0");
  const size_t largest = count / world + (count % world ? 1 : 0);
  pieces = std::max<size_t>(1, (largest + piece_elems - 1) / piece_elems);
}

Span RingLayout::segment(int seg) const {
  RF_ENFORCE(seg >= 0 && seg < world, "segment ", seg, " of ", world);
  const size_t base = count / world, rem = count % world, s = static_cast<size_t>(seg);
  return {s * base + std::min(s, rem), base + (s < rem ? 1 : 0)};
}

Span RingLayout::piece(int seg, size_t p) const {
  const Span s = segment(seg);
  const size_t begin = std::min(s.count, p * piece_elems);
  const size_t end = std::min(s.count, begin + piece_elems);
  return {s.offset + begin, end - begin};
}

}  // namespace rf::comm
