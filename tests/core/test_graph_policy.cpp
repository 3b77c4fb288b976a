#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/graph_policy.h"

namespace {

using rf::GraphDecision;
using rf::GraphKey;
using rf::GraphPolicy;
using rf::GraphRun;

GraphKey key(int64_t rows, bool warm = true) {
  GraphKey k;
  k.input_shape = {rows, 1, 28, 28};
  k.state_layout = 0x1234;
  k.hyper = 7;
  k.optimizer_warm = warm;
  return k;
}

// The runs of a sequence of steps, as a string: E eager, C capture, R replay; a '!' before
// a letter: the graph was dropped first.
std::string runs(GraphPolicy& p, const std::vector<GraphKey>& steps) {
  std::string out;
  for (const GraphKey& k : steps) {
    const GraphDecision d = p.decide(k);
    if (d.drop) out += '!';
    out += d.run == GraphRun::Eager ? 'E' : d.run == GraphRun::Capture ? 'C' : 'R';
  }
  return out;
}

}  // namespace

TEST_CASE("graph policy: off, every step eager and nothing is ever captured") {
  GraphPolicy p(false);
  CHECK(runs(p, {key(128, false), key(128), key(128), key(128)}) == "EEEE");
  CHECK(p.state() == GraphPolicy::State::Off);
}

TEST_CASE("graph policy: the optimizer's first step is eager, the warm key is captured once stable, then replayed") {
  GraphPolicy p(true);
  // the cold step's key is not the warm one's: the warm key's streak starts at step 1
  CHECK(runs(p, {key(128, false), key(128), key(128), key(128)}) == "EECR");
  CHECK(p.state() == GraphPolicy::State::Captured);
  CHECK(p.captured_key() == key(128));
}

TEST_CASE("graph policy: a key must be stable for stable_steps steps before it is captured") {
  GraphPolicy p(true, 3);
  CHECK(runs(p, {key(128), key(128), key(128), key(128)}) == "EECR");
  GraphPolicy one(true, 1);
  CHECK(runs(one, {key(128), key(128)}) == "CR");
}

TEST_CASE("graph policy: the short last batch of an epoch runs eagerly and the graph is kept") {
  GraphPolicy q(true);
  CHECK(runs(q, {key(128, false), key(128), key(128), key(96), key(128), key(128), key(96), key(128)}) == "EECERRER");
  CHECK(q.captured_key() == key(128));
}

TEST_CASE("graph policy: a batch shape that lasts is re-captured, dropping the old graph") {
  GraphPolicy p(true);
  CHECK(runs(p, {key(128), key(128), key(128), key(64), key(64), key(64)}) == "ECRE!CR");
  CHECK(p.captured_key() == key(64));
}

TEST_CASE("graph policy: a generation change drops the graph at once and re-captures once stable") {
  GraphPolicy p(true);
  CHECK(runs(p, {key(128), key(128), key(128)}) == "ECR");
  GraphKey next = key(128);
  next.generation = 1;
  CHECK(runs(p, {next, next, next}) == "!ECR");
  CHECK(p.captured_key().generation == 1);
}

TEST_CASE("graph policy: reallocated state, another learning rate or a cold optimizer drop the graph") {
  GraphKey moved = key(128);
  moved.state_layout = 0x9999;
  GraphKey lr = key(128);
  lr.hyper = 8;
  for (const GraphKey& changed : {moved, lr, key(128, false)}) {
    GraphPolicy p(true);
    CHECK(runs(p, {key(128), key(128), key(128)}) == "ECR");
    CHECK(runs(p, {changed}) == "!E");
    CHECK(p.state() == GraphPolicy::State::NoGraph);
    // the old key again: it is no longer captured, so it must be stable again first
    CHECK(runs(p, {key(128), key(128), key(128)}) == "ECR");
  }
}

TEST_CASE("graph policy: a failed capture turns it off for the rest of the run") {
  GraphPolicy p(true);
  CHECK(runs(p, {key(128), key(128)}) == "EC");
  p.capture_failed();
  CHECK(p.state() == GraphPolicy::State::Disabled);
  CHECK(runs(p, {key(128), key(128), key(128)}) == "EEE");
}
