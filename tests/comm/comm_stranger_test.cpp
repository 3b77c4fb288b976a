// comm_stranger_test — data-plane admission (comm/tag.h): a stranger that reaches the
// workers' UCX endpoints cannot deliver a byte into their collectives. Three processes under
// run_local_ranks: ranks 0 and 1 form a W = 2 UCX communicator (messages only: no
// shared-memory path, no single-copy reads), process 2 is the stranger. It holds the most a
// stranger could learn, both workers' UCX addresses, connects to both, and floods them with
// a poison message (every float 1e30) under every tag their next all-reduces use, before
// they run them; then the members all-reduce and check.
//
//   comm_stranger_test keyed        the members key their tags (the job's case); the stranger
//                                   sends the plain tags and the same tags under a wrong
//                                   key: every all-reduce is exact, on both ranks
//   comm_stranger_test unkeyed      the members do not key their tags: the poison lands (the
//                                   threat is real, and this test sees it)
//   comm_stranger_test stolen_key   the stranger holds the members' key: the poison lands
//                                   (the key is what keeps it out)
//
// Exit 0 when every process ended as its scenario says.
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <iostream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/str.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/tag.h"
#include "comm/ucx/ucx_communicator.h"
#include "comm/ucx/ucx_transport.h"
#include "tests/comm/mp_check.h"

using namespace rf::comm;

namespace {

using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

constexpr uint64_t kGeneration = 1;
constexpr int kSteps = 4;
constexpr size_t kCount = 1024;  // floats: an eager message, recursive doubling
constexpr uint32_t kChunks = 16;  // the chunk numbers the stranger covers, per step
const auto kTimeout = std::chrono::seconds(30);

TagKey members_key() { return TagKey{.enabled = true, .key = {0x0123456789abcdefULL, 0x0fedcba987654321ULL}}; }
TagKey wrong_key() { return TagKey{.enabled = true, .key = {0x0123456789abcdefULL, 0x0fedcba987654320ULL}}; }

// Exact in float: small integers, so a correct sum has one value and any poison shows.
float value(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 97)); }

int member(const std::string& scenario, int rank, FileStore& store) {
  UcxOptions o;
  o.shm = false;          // every byte through UCX messages: what a stranger could reach
  o.single_copy = false;
  if (scenario != "unkeyed") o.tag_key = members_key();
  UcxCommunicator c(UcxContext::create(), store, rank, 2, kGeneration, o);
  store.wait_get("stranger/flooded", kTimeout);  // the poison is on its way before we post
  int wrong_steps = 0, failed_steps = 0;
  std::vector<float> buf(kCount);
  for (int s = 0; s < kSteps; ++s) {
    for (size_t i = 0; i < kCount; ++i) buf[i] = value(rank, i);
    try {
      c.allreduce(Buffer{buf.data(), kCount, DType::f32}, OpId{static_cast<uint64_t>(s), 0});
    } catch (const CommError& e) {
      std::cerr << "rank " << rank << ": step " << s << ": " << e.what() << "\n";
      ++failed_steps;
      break;  // the communicator is poisoned after a failure
    }
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) bad += buf[i] != value(0, i) + value(1, i);
    if (bad) ++wrong_steps;
  }
  std::cerr << "rank " << rank << " (" << scenario << "): " << wrong_steps << " wrong and " << failed_steps
            << " failed all-reduce(s) of " << kSteps << "\n";
  if (scenario == "keyed") {
    EXPECT(wrong_steps == 0 && failed_steps == 0, "a stranger without the key reached an all-reduce");
  } else {
    EXPECT(wrong_steps + failed_steps > 0, "the stranger's poison never landed: this test could not see an injection");
  }
  return g_failures != 0;
}

// Posts `poison` to both members under every tag of their next all-reduces (keyed as t
// is), then progresses until UCX has nothing left to push: each message (or, above the
// eager size, its rendezvous request) has left. An unmatched rendezvous send never
// completes: its payload is fetched only by a receive that matches it.
void flood(UcxTransport& t, const std::vector<float>& poison, std::deque<Transfer>& sent) {
  for (int peer = 0; peer < 2; ++peer)
    for (int s = 0; s < kSteps; ++s)
      for (uint32_t chunk = 0; chunk < kChunks; ++chunk)
        for (bool reply : {false, true}) {
          const StepTag tag{kGeneration, static_cast<uint64_t>(s), 0, chunk, reply};
          sent.emplace_back();
          t.post_send(sent.back(), peer, poison.data(), poison.size() * sizeof(float), tag.encode());
          EXPECT(sent.back().state != Transfer::State::failed, "the stranger could not send: ", sent.back().cause);
        }
  for (int idle = 0; idle < 3;) idle = t.progress() == 0 ? idle + 1 : 0;
}

int stranger(const std::string& scenario, FileStore& store) {
  std::vector<std::vector<uint8_t>> addresses(3);
  for (int r = 0; r < 2; ++r) addresses[r] = store.wait_get(rf::str("g", kGeneration, "/addr/", r), kTimeout);
  const std::vector<float> poison(kCount, 1e30f);
  auto ctx = UcxContext::create();
  // The stranger's own place in its endpoint table is index 2 (no endpoint to itself).
  std::vector<TagKey> keys;
  if (scenario == "keyed") keys = {TagKey{}, wrong_key()};
  else if (scenario == "unkeyed") keys = {TagKey{}};
  else keys = {members_key()};
  std::vector<std::unique_ptr<UcxTransport>> transports;
  std::vector<std::deque<Transfer>> sent(keys.size());  // stable addresses: UCX holds the pending ones
  for (size_t i = 0; i < keys.size(); ++i) {
    transports.push_back(std::make_unique<UcxTransport>(ctx, 2, 3, keys[i]));
    addresses[2] = transports.back()->address();
    transports.back()->connect(addresses);
    flood(*transports.back(), poison, sent[i]);
  }
  store.set("stranger/flooded", std::vector<uint8_t>{1});
  // Serve our rendezvous requests (should anything match them) until both members are done.
  std::vector<bool> finished(2, false);
  auto done = [&](int r) {
    if (!finished[r]) {
      try {
        store.wait_get(rf::str("member/", r, "/done"), std::chrono::milliseconds(0));
        finished[r] = true;
      } catch (const TimedOut&) {
      }
    }
    return finished[r];
  };
  const rf::TimePoint deadline = rf::Clock::now() + kTimeout;
  while (!(done(0) && done(1)) && rf::Clock::now() < deadline)
    for (auto& t : transports) t->progress();
  EXPECT(done(0) && done(1), "the members did not finish within ", kTimeout.count(), " s");
  size_t completed = 0, total = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    for (Transfer& x : sent[i]) {
      completed += transports[i]->test(x) && x.state == Transfer::State::done;
      ++total;
    }
  // Eager sends complete once they left: completed is no sign that anything matched.
  std::cerr << "stranger (" << scenario << "): " << completed << " of " << total << " sends completed\n";
  for (auto& t : transports) t->shut_down_transfers();
  for (auto& t : transports) t->close_endpoints(true, rf::Clock::now() + std::chrono::seconds(2));
  return g_failures != 0;
}

int run_rank(const std::string& scenario) {
  const RankEnv env = rank_env_from_environment();
  g_rank = env.rank;
  FileStore store(env.store_dir);
  if (env.rank == 2) return stranger(scenario, store);
  int rc = 1;
  try {
    rc = member(scenario, env.rank, store);
  } catch (const std::exception& e) {
    std::cerr << "rank " << env.rank << ": " << e.what() << "\n";
  }
  store.set(rf::str("member/", env.rank, "/done"), std::vector<uint8_t>{1});
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc == 2 ? argv[1] : "";
  if (scenario != "keyed" && scenario != "unkeyed" && scenario != "stolen_key") {
    std::cerr << "usage: comm_stranger_test keyed|unkeyed|stolen_key\n";
    return 2;
  }
  if (std::getenv("RF_RANK")) return run_rank(scenario);
  const int rc = rf::comm::testing::run_and_report(rf::comm::testing::self_launch({scenario}, 3, std::chrono::seconds(60)),
                                                   [](int rank) { return rank == 2 ? "stranger " : "member "; });
  std::cerr << "comm_stranger_test " << scenario << ": " << (rc ? "FAILED" : "passed") << "\n";
  return rc;
}
