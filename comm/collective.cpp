#include "comm/collective.h"

#include "base/enforce.h"
#include "comm/errors.h"
#include "comm/tag.h"

namespace rf::comm {

Collective::Collective(const char* name, OpId id, int flows) : name_(name), id_(id), nflows_(flows) {
  RF_ENFORCE(flows >= 1 && flows <= kMaxFlows, "flows ", flows);
}

void Collective::post(const Context& c, Flow& f) {
  const Round& r = f.round;
  const uint64_t g = generation_override_ >= 0 ? static_cast<uint64_t>(generation_override_) : c.generation;
  const uint64_t tag = StepTag{g, id_.step, id_.op, r.chunk}.encode();
  const uint64_t send_tag =
      r.send_chunk < 0 ? tag : StepTag{g, id_.step, id_.op, static_cast<uint32_t>(r.send_chunk)}.encode();
  // Receive first: an eager message that arrives before its receive is posted is copied
  // twice (into UCX's unexpected queue, then out).
  const bool single_copy = !single_copy_off_ && single_copy_ok();
  if (r.recv_peer >= 0 && r.recv_bytes > 0) {
    c.transport->post_recv(f.recv, r.recv_peer, r.recv_data, r.recv_bytes, tag, r.exact_length, single_copy);
  }
  if (r.send_peer >= 0 && r.send_bytes > 0) {
    c.transport->post_send(f.send, r.send_peer, r.send_data, r.send_bytes, send_tag, single_copy);
  }
}

bool Collective::advance(const Context& c, bool& progressed) {
  bool all_finished = true;
  for (int i = 0; i < nflows_; ++i) {
    Flow& f = flows_[i];
    while (!f.finished) {
      if (!f.in_round) {
        if (!plan(i, f.k, f.round)) {
          f.finished = true;
          break;
        }
        post(c, f);
        f.in_round = true;
      }
      const bool send_over = f.send.state == Transfer::State::idle || c.transport->test(f.send);
      const bool recv_over = f.recv.state == Transfer::State::idle || c.transport->test(f.recv);
      if (!send_over || !recv_over) break;
      for (Transfer* t : {&f.recv, &f.send}) {
        if (t->state == Transfer::State::failed) {
          fail_peer(c, t->peer, static_cast<int64_t>(f.round.chunk), t->cause);
        }
      }
      if (f.send.state != Transfer::State::idle || f.recv.state != Transfer::State::idle) progressed = true;
      complete(i, f.k, f.round);
      last_chunk_ = f.round.chunk;
      f.send = Transfer{};
      f.recv = Transfer{};
      f.in_round = false;
      ++f.k;
      ++chunks_done_;
      if (reports_chunks() && c.on_chunk && *c.on_chunk) {
        (*c.on_chunk)(ChunkEvent{c.generation, id_.step, id_.op, chunks_done_});
      }
    }
    if (!f.finished) all_finished = false;
  }
  return all_finished;
}

bool Collective::quiesce(Transport& t) {
  bool quiet = true;
  for (int i = 0; i < nflows_; ++i) {
    for (Transfer* x : {&flows_[i].recv, &flows_[i].send}) {
      if (x->state != Transfer::State::pending) continue;
      if (t.test(*x)) continue;
      t.cancel(*x);  // receives; a single-copy send's wait for its Done
      quiet = false;
    }
  }
  return quiet;
}

void Collective::waiting_on(int& peer, int64_t& chunk) const {
  peer = -1;
  chunk = last_chunk_;
  // The first flow with an unfinished receive names the peer we wait on; failing that, an
  // unfinished send (a rendezvous send waits for the receiver to fetch the data).
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < nflows_; ++i) {
      const Flow& f = flows_[i];
      if (!f.in_round) continue;
      const Transfer& t = pass == 0 ? f.recv : f.send;
      if (t.state == Transfer::State::pending) {
        peer = t.peer;
        chunk = f.round.chunk;
        return;
      }
    }
  }
}

void Collective::fail_peer(const Context& c, int peer, int64_t chunk, std::string cause) const {
  CommErrorInfo e;
  e.rank = c.rank;
  e.collective = name_;
  e.generation = static_cast<int64_t>(c.generation);
  e.step = static_cast<int64_t>(id_.step);
  e.op = id_.op;
  e.chunk = chunk;
  e.peer = peer;
  e.cause = std::move(cause);
  throw PeerFailed(e);
}

}  // namespace rf::comm
