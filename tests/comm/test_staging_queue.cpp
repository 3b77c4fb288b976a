// StagingQueue (comm/cuda/staging_queue.h): staged collectives reach the host communicator
// in the order they were enqueued, whatever order their copies are noticed in.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "comm/cuda/staging_queue.h"

using rf::comm::cuda::StagingQueue;

namespace {
std::vector<uint64_t> drain(StagingQueue& q) {
  std::vector<uint64_t> out;
  uint64_t id = 0;
  while (q.next_startable(&id)) out.push_back(id);
  return out;
}
}  // namespace

TEST_CASE("staged collectives start in enqueue order, each once its copy is done") {
  StagingQueue q;
  const uint64_t a = q.enqueue(), b = q.enqueue(), c = q.enqueue();
  CHECK(a < b);
  CHECK(b < c);
  CHECK(drain(q).empty());  // nothing copied yet
  q.copied(c);               // noticed first, but enqueued last: waits for a and b
  q.copied(b);
  CHECK(drain(q).empty());
  CHECK(q.waiting() == 3);
  q.copied(a);
  CHECK(drain(q) == std::vector<uint64_t>{a, b, c});
  CHECK(q.empty());
  CHECK(drain(q).empty());
}

TEST_CASE("a dropped collective does not hold back the ones after it") {
  StagingQueue q;
  const uint64_t a = q.enqueue(), b = q.enqueue();
  q.copied(b);
  CHECK(drain(q).empty());
  q.drop(a);  // its Work was abandoned before it started
  CHECK(drain(q) == std::vector<uint64_t>{b});
  q.drop(a);  // unknown ids: nothing
  const uint64_t c = q.enqueue();
  CHECK(c > b);
  q.copied(c);
  CHECK(drain(q) == std::vector<uint64_t>{c});
}
