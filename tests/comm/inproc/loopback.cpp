#include "tests/comm/inproc/loopback.h"

#include <cstring>
#include <exception>
#include <thread>

#include "base/str.h"
#include "comm/errors.h"
#include "comm/tag.h"

namespace rf::comm::inproc {

// ---- the fabric ----

Fabric::Fabric(int world) : world_(world), inbox_(world), dead_(world, false) {
  for (int r = 0; r < world; ++r) endpoints_.push_back(std::make_unique<LoopbackTransport>(*this, r));
}

void Fabric::kill(int rank) {
  std::lock_guard lk(mu_);
  dead_.at(rank) = true;
  inbox_.at(rank).clear();
}

size_t Fabric::unmatched(int to) const {
  std::lock_guard lk(mu_);
  return inbox_.at(to).size();
}

// ---- one rank's transport ----
// A send copies its bytes into the receiver's inbox at once (an eager message) and is done
// at its first test(); a receive takes the oldest message of its peer with all 64 tag bits
// equal, at a test(); a pending receive keeps its destination in Transfer::request.

int LoopbackTransport::world_size() const { return fabric_.world(); }

namespace {
void fail(Transfer& t, std::string cause) {
  t.state = Transfer::State::failed;
  t.cause = std::move(cause);
}
}  // namespace

void LoopbackTransport::post_send(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag, bool) {
  t = Transfer{};
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes;
  t.state = Transfer::State::pending;
  std::lock_guard lk(fabric_.mu_);
  if (shut_down_ || fabric_.dead_.at(rank_)) return fail(t, "this endpoint is shut down");
  if (fabric_.dead_.at(peer)) return fail(t, rf::str("rank ", peer, " is gone"));
  const auto* p = static_cast<const unsigned char*>(data);
  fabric_.inbox_.at(peer).push_back({rank_, tag, std::vector<unsigned char>(p, p + bytes)});
}

void LoopbackTransport::post_recv(Transfer& t, int peer, void* data, size_t bytes, uint64_t tag, bool exact_length,
                                  bool) {
  t = Transfer{};
  t.is_recv = true;
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes;
  t.exact_length = exact_length;
  t.request = data;  // the backend handle: where the bytes go
  t.state = Transfer::State::pending;
}

bool LoopbackTransport::test(Transfer& t) {
  if (t.state != Transfer::State::pending) return t.finished();
  if (!t.is_recv) {
    t.state = Transfer::State::done;
    return true;
  }
  std::lock_guard lk(fabric_.mu_);
  if (t.cancel_requested || shut_down_) {
    fail(t, "cancelled");
    return true;
  }
  auto& inbox = fabric_.inbox_.at(rank_);
  for (auto it = inbox.begin(); it != inbox.end(); ++it) {
    if (it->from != t.peer || it->tag != t.tag) continue;
    if (it->bytes.size() > t.bytes || (t.exact_length && it->bytes.size() != t.bytes)) {
      fail(t, rf::str("message of ", it->bytes.size(), " bytes for a receive of ", t.bytes));
    } else {
      std::memcpy(t.request, it->bytes.data(), it->bytes.size());
      t.state = Transfer::State::done;
    }
    inbox.erase(it);
    return true;
  }
  if (fabric_.dead_.at(t.peer)) fail(t, rf::str("rank ", t.peer, " is gone"));
  return t.finished();
}

void LoopbackTransport::cancel(Transfer& t) { t.cancel_requested = true; }

int LoopbackTransport::failure_count() const {
  std::lock_guard lk(fabric_.mu_);
  int n = 0;
  for (int r = 0; r < fabric_.world_; ++r) n += r != rank_ && fabric_.dead_[r];
  return n;
}

bool LoopbackTransport::peer_failed(int peer, std::string* cause) const {
  std::lock_guard lk(fabric_.mu_);
  if (!fabric_.dead_.at(peer)) return false;
  if (cause) *cause = rf::str("rank ", peer, " is gone");
  return true;
}

void LoopbackTransport::shut_down_transfers() {
  std::lock_guard lk(fabric_.mu_);
  shut_down_ = true;
}

// ---- the driver ----

namespace {

CommErrorInfo info_of(const Collective& c, const DriveOptions& o) {
  CommErrorInfo i;
  i.rank = o.rank;
  i.collective = c.name();
  i.generation = static_cast<int64_t>(o.generation);
  i.step = static_cast<int64_t>(c.id().step);
  i.op = c.id().op;
  return i;
}

// After a failure: nothing of c may stay pending (its buffers are the caller's).
void quiesce(Collective& c, Transport& t) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!c.quiesce(t)) {
    if (std::chrono::steady_clock::now() > deadline) throw rf::Error("a collective did not quiesce in 5 s");
    std::this_thread::yield();
  }
}

int dead_peer(const Transport& t) {
  for (int p = 0; p < t.world_size(); ++p)
    if (p != t.rank() && t.peer_failed(p, nullptr)) return p;
  return -1;
}

}  // namespace

void drive(Collective& c, Transport& t, const DriveOptions& o) {
  const Collective::Context ctx{&t, o.generation, o.rank, nullptr, nullptr};
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    bool progressed = false;
    try {
      if (c.advance(ctx, progressed)) return;
    } catch (const CommError&) {
      quiesce(c, t);
      throw;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progressed) last_progress = now;
    if (t.failure_count() > 0) {  // a dead member dooms every collective of the generation
      CommErrorInfo i = info_of(c, o);
      i.peer = dead_peer(t);
      t.peer_failed(i.peer, &i.cause);
      quiesce(c, t);
      throw PeerFailed(i);
    }
    if (now - last_progress > o.stall) {
      CommErrorInfo i = info_of(c, o);
      c.waiting_on(i.peer, i.chunk);
      i.cause = rf::str("no progress for ", std::chrono::duration<double>(now - last_progress).count(), " s");
      quiesce(c, t);
      throw TimedOut(i);
    }
    std::this_thread::yield();
  }
}

void spawn(int world, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < world; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      throw rf::Error(rf::str("rank ", r, ": ", e.what()));
    }
  }
}

}  // namespace rf::comm::inproc
