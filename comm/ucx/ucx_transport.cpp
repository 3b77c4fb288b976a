#include "comm/ucx/ucx_transport.h"

#include "comm/errors.h"

#include <unistd.h>

#include <cstring>
#include <new>
#include <type_traits>

#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/tag.h"
#include "comm/ucx/single_copy.h"

namespace rf::comm {

namespace {

// What a single-copy transfer keeps in Transfer::backend_state (zeroed at post: phase 0, an
// ordinary message).
struct Rendezvous {
  uint8_t phase;                      // 1: the Offer (sent, or awaited); 2: sending the Done
  void* request2;                     // the sender: the receive of the Done
  void* data;                         // the receiver: where the bytes go
  alignas(8) unsigned char ctrl[64];  // the Offer (either side), then the Done
};
static_assert(std::is_trivial_v<Rendezvous> && sizeof(Rendezvous) <= sizeof(Transfer::backend_state));

Rendezvous& rv(Transfer& t) { return *std::launder(reinterpret_cast<Rendezvous*>(t.backend_state)); }

}  // namespace

UcxTransport::UcxTransport(std::shared_ptr<UcxContext> context, int rank, int world, TagKey key)
    : context_(std::move(context)),
      rank_(rank),
      world_(world),
      key_(key),
      hold_token_(make_hold_token()),
      hold_word_(hold_token_) {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t st = ucp_worker_create(context_->handle(), &wp, &worker_);
  if (st != UCS_OK) throw rf::Error(rf::str("ucp_worker_create: ", ucs_status_string(st)));
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = ucp_worker_get_address(worker_, &addr, &len);
  if (st != UCS_OK) {
    ucp_worker_destroy(worker_);
    throw rf::Error(rf::str("ucp_worker_get_address: ", ucs_status_string(st)));
  }
  address_.assign(reinterpret_cast<const uint8_t*>(addr), reinterpret_cast<const uint8_t*>(addr) + len);
  ucp_worker_release_address(worker_, addr);
  for (int r = 0; r < world_; ++r) {
    auto p = std::make_unique<Peer>();
    p->self = this;
    p->rank = r;
    peers_.push_back(std::move(p));
  }
}

UcxTransport::~UcxTransport() {
  hold_word_.store(0, std::memory_order_seq_cst);
  close_endpoints(true, Clock::now() + std::chrono::milliseconds(100));
  if (worker_) ucp_worker_destroy(worker_);
}

void UcxTransport::on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  // Runs inside ucp_worker_progress on the driving thread: record and poison, nothing else.
  auto* p = static_cast<Peer*>(arg);
  if (p->error == UCS_OK) {
    p->error = status;
    ++p->self->failures_;
  }
}

void UcxTransport::connect(const std::vector<std::vector<uint8_t>>& addresses) {
  RF_ENFORCE(static_cast<int>(addresses.size()) == world_, "addresses for ", addresses.size(), " ranks, world ", world_);
  for (int r = 0; r < world_; ++r) {
    if (addresses[r].empty()) throw rf::InvalidInput(rf::str("empty UCX address for rank ", r));
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses[r].data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::on_endpoint_error;
    ep.err_handler.arg = peers_[r].get();
    ucs_status_t st = ucp_ep_create(worker_, &ep, &peers_[r]->ep);
    if (st != UCS_OK) {
      // The peer published an address it no longer serves (it died while we connect):
      // a peer failure like any other, so recovery starts again rather than the worker
      // dying on an untyped error.
      CommErrorInfo info;
      info.collective = "connect";
      info.peer = r;
      info.cause = rf::str("ucp_ep_create: ", ucs_status_string(st));
      throw PeerFailed(info);
    }
  }
}

void UcxTransport::close_endpoints(bool force, TimePoint deadline) {
  std::vector<void*> closing;
  for (auto& p : peers_) {
    if (!p->ep) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // UCX 1.13 trap: the flag must be UCP_EP_CLOSE_FLAG_FORCE, not the old enum value 0.
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &param);
    p->ep = nullptr;
    if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
  }
  // Bounded: a flush to a hung or lossy peer may never finish. What is still in progress at
  // the deadline is handed back with ucp_request_free (UCX completes it internally): a close
  // request the user never released makes ucp_worker_destroy abort on an assertion
  // (UCP_REQUEST_FLAG_RELEASED), which killed workers after their leave on a lossy link.
  while (!closing.empty()) {
    ucp_worker_progress(worker_);
    for (size_t i = 0; i < closing.size();) {
      if (ucp_request_check_status(closing[i]) != UCS_INPROGRESS) {
        ucp_request_free(closing[i]);
        closing[i] = closing.back();
        closing.pop_back();
      } else {
        ++i;
      }
    }
    if (Clock::now() >= deadline) break;
  }
  for (void* req : closing) ucp_request_free(req);
}

void UcxTransport::post_send(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag,
                             bool bulk) {
  t = Transfer{};
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes;
  Peer& p = *peers_[peer];
  if (!p.ep) {
    t.state = Transfer::State::failed;
    t.cause = p.error != UCS_OK ? rf::str("endpoint error: ", ucs_status_string(p.error)) : "endpoint closed";
    return;
  }
  if (bulk && p.sc_send && single_copy_bytes_ > 0 && bytes >= single_copy_bytes_) {
    // Rendezvous (single_copy.h): wait for the Done first, then offer the region.
    rv(t).phase = 1;
    t.state = Transfer::State::pending;
    static_assert(sizeof(SingleCopyOffer) + sizeof(SingleCopyDone) <= sizeof(rv(t).ctrl));
    SingleCopyOffer offer;
    offer.pid = static_cast<int64_t>(getpid());
    offer.address = reinterpret_cast<uint64_t>(data);
    offer.bytes = bytes;
    offer.hold_address = hold_address();
    offer.hold_token = hold_token_;
    std::memcpy(rv(t).ctrl, &offer, sizeof(offer));
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    const uint64_t reply = tag | (uint64_t{1} << StepTag::kReplyBit);
    ucs_status_ptr_t rr = ucp_tag_recv_nbx(worker_, rv(t).ctrl + sizeof(SingleCopyOffer), sizeof(SingleCopyDone),
                                           key_.wire(reply), ~ucp_tag_t{0}, &rp);
    if (UCS_PTR_IS_ERR(rr)) {
      fail(t, UCS_PTR_STATUS(rr), "single-copy: receive of the done message");
      return;
    }
    rv(t).request2 = rr;
    send_ctrl(t, peer, rv(t).ctrl, sizeof(SingleCopyOffer), tag, &t.request);
    return;
  }
  ucp_request_param_t param{};
  ucs_status_ptr_t req = ucp_tag_send_nbx(p.ep, data, bytes, key_.wire(tag), &param);
  if (req == nullptr) {
    t.state = Transfer::State::done;
  } else if (UCS_PTR_IS_ERR(req)) {
    t.state = Transfer::State::failed;
    t.cause = rf::str("send: ", ucs_status_string(UCS_PTR_STATUS(req)));
  } else {
    t.state = Transfer::State::pending;
    t.request = req;
  }
}

void UcxTransport::post_recv(Transfer& t, int peer, void* data, size_t bytes, uint64_t tag, bool exact_length,
                             bool bulk) {
  t = Transfer{};
  t.is_recv = true;
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes;
  if (bulk && peers_[peer]->sc_recv && single_copy_bytes_ > 0 && bytes >= single_copy_bytes_) {
    // Rendezvous (single_copy.h): the Offer first; test() reads and answers.
    rv(t).phase = 1;
    rv(t).data = data;
    t.state = Transfer::State::pending;
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;  // so recv_info (the length) is always set
    ucs_status_ptr_t req =
        ucp_tag_recv_nbx(worker_, rv(t).ctrl, sizeof(SingleCopyOffer), key_.wire(tag), ~ucp_tag_t{0}, &rp);
    if (UCS_PTR_IS_ERR(req)) fail(t, UCS_PTR_STATUS(req), "single-copy: receive of the offer");
    else t.request = req;
    return;
  }
  ucp_request_param_t param{};
  // For an exact length, always a request: UCX 1.13 leaves recv_info unset when a receive
  // completes at once, and a blob of the wrong size must be an error. (Larger messages
  // fail anyway, as truncated.)
  if (exact_length) param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  // Match every bit: the tag names generation, step, op and chunk (comm/tag.h); the
  // chunk numbering makes the sender implicit.
  ucs_status_ptr_t req = ucp_tag_recv_nbx(worker_, data, bytes, key_.wire(tag), ~ucp_tag_t{0}, &param);
  t.exact_length = exact_length;
  if (req == nullptr) {
    t.state = Transfer::State::done;
  } else if (UCS_PTR_IS_ERR(req)) {
    t.state = Transfer::State::failed;
    t.cause = rf::str("receive: ", ucs_status_string(UCS_PTR_STATUS(req)));
  } else {
    t.state = Transfer::State::pending;
    t.request = req;
  }
}

bool UcxTransport::test(Transfer& t) {
  if (t.state != Transfer::State::pending) return t.finished();
  if (rv(t).phase != 0) return test_single_copy(t);
  ucs_status_t st;
  ucp_tag_recv_info_t info{};
  if (t.is_recv) st = ucp_tag_recv_request_test(t.request, &info);
  else st = ucp_request_check_status(t.request);
  if (st == UCS_INPROGRESS) return false;
  ucp_request_free(t.request);
  t.request = nullptr;
  if (st != UCS_OK) {
    t.state = Transfer::State::failed;
    const Peer& p = *peers_[t.peer];
    // A request that failed because its endpoint died says so; the endpoint's own status
    // is the better cause ("Connection reset by remote peer").
    t.cause = p.error != UCS_OK ? rf::str("endpoint error: ", ucs_status_string(p.error))
                                : rf::str(t.is_recv ? "receive: " : "send: ", ucs_status_string(st));
  } else if (t.is_recv && t.exact_length && info.length != t.bytes) {
    t.state = Transfer::State::failed;
    t.cause = rf::str("received ", info.length, " bytes, expected ", t.bytes);
  } else {
    t.state = Transfer::State::done;
  }
  return true;
}

void UcxTransport::cancel(Transfer& t) {
  // UCX trap: freeing a receive does not stop UCX writing into its buffer; cancel it
  // and let test() see it finish.
  if (t.state != Transfer::State::pending || t.cancel_requested) return;
  if (rv(t).phase != 0) {
    // Single-copy: the receive of the Offer (receiver) or of the Done (sender). A Done
    // being sent ends with the endpoint's force close.
    void* r = t.is_recv ? (rv(t).phase == 1 ? t.request : nullptr) : rv(t).request2;
    if (r == nullptr) return;
    t.cancel_requested = true;
    ucp_request_cancel(worker_, r);
    return;
  }
  if (!t.is_recv) return;
  t.cancel_requested = true;
  ucp_request_cancel(worker_, t.request);
}

void UcxTransport::fail(Transfer& t, ucs_status_t st, const char* what) {
  t.state = Transfer::State::failed;
  const Peer& p = *peers_[t.peer];
  t.cause = p.error != UCS_OK ? rf::str("endpoint error: ", ucs_status_string(p.error))
                              : rf::str(what, ": ", ucs_status_string(st));
}

void UcxTransport::send_ctrl(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag, void** request) {
  Peer& p = *peers_[peer];
  if (!p.ep) {
    t.state = Transfer::State::failed;
    t.cause = p.error != UCS_OK ? rf::str("endpoint error: ", ucs_status_string(p.error)) : "endpoint closed";
    return;
  }
  ucp_request_param_t param{};
  ucs_status_ptr_t req = ucp_tag_send_nbx(p.ep, data, bytes, key_.wire(tag), &param);
  if (UCS_PTR_IS_ERR(req)) fail(t, UCS_PTR_STATUS(req), "single-copy: send");
  else *request = req;  // nullptr: done already
}

namespace {

// Polls one UCX request of a rendezvous (info: a receive's, else a send's); frees it once
// it ended. UCS_OK also when there is no request (it completed at once).
ucs_status_t poll_request(void*& req, ucp_tag_recv_info_t* info) {
  if (req == nullptr) return UCS_OK;
  const ucs_status_t st = info ? ucp_tag_recv_request_test(req, info) : ucp_request_check_status(req);
  if (st == UCS_INPROGRESS) return st;
  ucp_request_free(req);
  req = nullptr;
  return st;
}

}  // namespace

// The rendezvous's UCX requests are polled; on any failure the transfer fails, but only
// once every request of it is freed (so nothing is left writing into rv(t).ctrl).
bool UcxTransport::test_single_copy(Transfer& t) {
  if (!t.is_recv) return test_single_copy_send(t);
  if (rv(t).phase == 1) return test_single_copy_offer(t);
  // Sending the Done.
  const ucs_status_t st = poll_request(t.request, nullptr);
  if (st == UCS_INPROGRESS) return false;
  if (st != UCS_OK) fail(t, st, "single-copy: send of the done message");
  else t.state = Transfer::State::done;
  return true;
}

// The sender: its Offer sent, it waits for the receiver's Done.
bool UcxTransport::test_single_copy_send(Transfer& t) {
  const ucs_status_t s1 = poll_request(t.request, nullptr);
  ucp_tag_recv_info_t info{};
  const bool waited = rv(t).request2 != nullptr;
  const ucs_status_t s2 = poll_request(rv(t).request2, &info);
  if (s1 != UCS_OK && s1 != UCS_INPROGRESS && t.cause.empty()) fail(t, s1, "single-copy: send of the offer");
  if (s2 != UCS_OK && s2 != UCS_INPROGRESS && t.cause.empty()) fail(t, s2, "single-copy: waiting for the done message");
  if (waited && s2 == UCS_OK && info.length != sizeof(SingleCopyDone) && t.cause.empty()) {
    t.state = Transfer::State::failed;
    t.cause = rf::str("single-copy: malformed done message (", info.length, " bytes)");
  }
  if (t.request != nullptr || rv(t).request2 != nullptr) {
    // A failed transfer still waits for its other request; make sure it ends.
    if (!t.cause.empty()) {
      t.state = Transfer::State::pending;
      cancel(t);
    }
    return false;
  }
  if (!t.cause.empty()) {
    t.state = Transfer::State::failed;
    return true;
  }
  SingleCopyDone done;
  std::memcpy(&done, rv(t).ctrl + sizeof(SingleCopyOffer), sizeof(done));
  if (done.magic != SingleCopyDone::kMagic) {
    t.state = Transfer::State::failed;
    t.cause = "single-copy: malformed done message";
    return true;
  }
  t.state = Transfer::State::done;
  return true;
}

// The receiver, waiting for the Offer: once it came, read the bytes from the sender's
// memory and send the Done.
bool UcxTransport::test_single_copy_offer(Transfer& t) {
  ucp_tag_recv_info_t info{};
  const ucs_status_t st = poll_request(t.request, &info);
  if (st == UCS_INPROGRESS) return false;
  if (st != UCS_OK) {
    fail(t, st, "single-copy: receive of the offer");
    return true;
  }
  SingleCopyOffer offer;
  std::memcpy(&offer, rv(t).ctrl, sizeof(offer));
  if (const std::string why = read_offered(t, offer, info.length); !why.empty()) {
    t.state = Transfer::State::failed;
    t.cause = rf::str("single-copy read from rank ", t.peer, ": ", why);
    return true;
  }
  ++single_copy_reads_;
  static_assert(sizeof(SingleCopyDone) <= sizeof(rv(t).ctrl));
  SingleCopyDone done;
  std::memcpy(rv(t).ctrl, &done, sizeof(done));
  rv(t).phase = 2;
  send_ctrl(t, t.peer, rv(t).ctrl, sizeof(done), t.tag | (uint64_t{1} << StepTag::kReplyBit), &t.request);
  if (t.state == Transfer::State::failed) return true;
  if (t.request == nullptr) {
    t.state = Transfer::State::done;
    return true;
  }
  return false;
}

// Checks the Offer against what this receive expects and reads the bytes it names; why it
// cannot, or "" once the bytes are in rv(t).data and the sender still held its buffer.
std::string UcxTransport::read_offered(Transfer& t, const SingleCopyOffer& offer, size_t length) {
  const Peer& p = *peers_[t.peer];
  if (length != sizeof(offer) || offer.magic != SingleCopyOffer::kMagic) {
    return rf::str("malformed offer (", length, " bytes; both ranks must use the same single_copy_bytes)");
  }
  if (offer.bytes != t.bytes) return rf::str("offer of ", offer.bytes, " bytes, expected ", t.bytes);
  if (offer.pid != p.pid) return rf::str("offer names pid ", offer.pid, ", rank ", t.peer, " is pid ", p.pid);
  std::string why = read_remote(static_cast<pid_t>(offer.pid), rv(t).data, offer.address, t.bytes);
  uint64_t hold = 0;
  if (why.empty()) why = read_remote(static_cast<pid_t>(offer.pid), &hold, offer.hold_address, sizeof(hold));
  // The sender released its buffers (it failed or aborted) before we were done: the bytes
  // may be torn, never use them.
  if (why.empty() && hold != offer.hold_token) why = "the sender released its buffer during the read (it failed or aborted)";
  return why;
}

void UcxTransport::shut_down_transfers() {
  // First: no peer may complete a read of our buffers from now on (single_copy.h).
  release_offered_buffers();
  close_endpoints(true, Clock::now() + std::chrono::milliseconds(5));
}

void UcxTransport::set_single_copy(int peer, int64_t pid, bool send_ok, bool recv_ok) {
  Peer& p = *peers_[peer];
  p.pid = pid;
  p.sc_send = send_ok;
  p.sc_recv = recv_ok;
}

unsigned UcxTransport::progress() { return ucp_worker_progress(worker_); }

bool UcxTransport::peer_failed(int peer, std::string* cause) const {
  const ucs_status_t e = peers_[peer]->error;
  if (e == UCS_OK) return false;
  if (cause) *cause = rf::str("endpoint error: ", ucs_status_string(e));
  return true;
}

}  // namespace rf::comm
