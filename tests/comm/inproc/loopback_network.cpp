// LoopbackNetwork and the farewell board of each generation (loopback_communicator.h).
#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/tag.h"
#include "tests/comm/inproc/loopback_communicator.h"

namespace rf::comm::inproc {

// ---- one generation's farewells ----

void LoopbackGeneration::say(int from, Farewell f) {
  std::lock_guard lk(mu_);
  Farewell& mine = said_.at(from);
  if (mine.kind != Farewell::Kind::none) return;
  mine = std::move(f);
  said_count_.fetch_add(1, std::memory_order_release);
}

bool LoopbackGeneration::heard(int rank, Farewell& f, int& from) const {
  if (said_count_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lk(mu_);
  int aborted_by = -1;
  for (int r = 0; r < static_cast<int>(said_.size()); ++r) {
    if (r == rank) continue;
    if (said_[r].kind == Farewell::Kind::failed) {
      f = said_[r];
      from = r;
      return true;
    }
    if (said_[r].kind == Farewell::Kind::aborted && aborted_by < 0) aborted_by = r;
  }
  if (aborted_by < 0) return false;
  f = said_[aborted_by];
  from = aborted_by;
  return true;
}

// ---- the network ----

namespace {

// As the UCX backend connects: publish this rank, wait for every peer, each within the
// connect deadline (a store that ends its waits at a revocation ends this one too).
void rendezvous(BootstrapStore& store, const CommOptions& o) {
  const std::string prefix = rf::str("g", o.generation, "/addr/");
  const std::string me = rf::str("loopback rank ", o.rank);
  store.set(prefix + std::to_string(o.rank), std::vector<uint8_t>(me.begin(), me.end()));
  for (int r = 0; r < o.world; ++r) {
    try {
      store.wait_get(prefix + std::to_string(r), o.connect_timeout);
    } catch (const TimedOut& e) {
      CommErrorInfo i = e.info();
      i.rank = o.rank;
      i.generation = static_cast<int64_t>(o.generation);
      i.peer = r;
      throw TimedOut(i);
    }
  }
}

}  // namespace

std::shared_ptr<Communicator> LoopbackNetwork::connect(const CommOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    throw rf::InvalidInput(rf::str("loopback communicator: rank ", o.rank, " of world size ", o.world));
  }
  if (o.generation > StepTag::kMaxGeneration) {
    throw rf::InvalidInput(rf::str("loopback communicator: generation ", o.generation, " does not fit the tag (max ",
                                   StepTag::kMaxGeneration, ")"));
  }
  std::shared_ptr<LoopbackGeneration> g;
  {
    std::lock_guard lk(mu_);
    auto& slot = generations_[o.generation];
    if (!slot) slot = std::make_shared<LoopbackGeneration>(o.generation, o.world);
    RF_ENFORCE(slot->fabric().world() == o.world, "generation ", o.generation, " has world size ",
               slot->fabric().world(), ", rank ", o.rank, " connects with ", o.world);
    RF_ENFORCE(!slot->connected_[o.rank], "rank ", o.rank, " of generation ", o.generation, " connects twice");
    slot->connected_[o.rank] = true;
    g = slot;
  }
  auto c = std::make_shared<LoopbackCommunicator>(g, o, opt_);
  if (!o.store) return c;
  try {
    rendezvous(*o.store, o);
  } catch (...) {
    std::lock_guard lk(mu_);
    g->connected_[o.rank] = false;  // it may try again
    throw;
  }
  return c;
}

void LoopbackNetwork::kill(uint64_t generation, int rank) {
  std::shared_ptr<LoopbackGeneration> g = find(generation);
  if (g && rank >= 0 && rank < g->fabric().world()) g->fabric().kill(rank);
}

void LoopbackNetwork::kill_everywhere(int rank) {
  std::lock_guard lk(mu_);
  for (auto& [generation, g] : generations_) {
    if (rank >= 0 && rank < g->fabric().world()) g->fabric().kill(rank);
  }
}

std::shared_ptr<LoopbackGeneration> LoopbackNetwork::find(uint64_t generation) const {
  std::lock_guard lk(mu_);
  auto it = generations_.find(generation);
  return it == generations_.end() ? nullptr : it->second;
}

}  // namespace rf::comm::inproc
