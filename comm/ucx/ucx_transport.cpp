#include "comm/ucx/ucx_transport.h"

#include <cstring>

#include "base/enforce.h"
#include "base/error.h"
#include "base/str.h"

namespace rf::comm {

UcxTransport::UcxTransport(std::shared_ptr<UcxContext> context, int rank, int world)
    : context_(std::move(context)), rank_(rank), world_(world) {
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
    if (st != UCS_OK) throw rf::Error(rf::str("ucp_ep_create to rank ", r, ": ", ucs_status_string(st)));
  }
}

void UcxTransport::close_endpoints(bool force, TimePoint deadline) {
  std::vector<void*> closing;
  for (auto& p : peers_) {
    if (!p->ep) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // STYLE.md trap: the flag must be UCP_EP_CLOSE_FLAG_FORCE, not the old enum value 0.
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &param);
    p->ep = nullptr;
    if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
  }
  // Bounded: a flush to a hung peer may never finish; then the worker's destruction
  // releases what is left.
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
}

void UcxTransport::post_send(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag) {
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
  ucp_request_param_t param{};
  ucs_status_ptr_t req = ucp_tag_send_nbx(p.ep, data, bytes, tag, &param);
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

void UcxTransport::post_recv(Transfer& t, int peer, void* data, size_t bytes, uint64_t tag, bool exact_length) {
  t = Transfer{};
  t.is_recv = true;
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes;
  ucp_request_param_t param{};
  // For an exact length, always a request: UCX 1.13 leaves recv_info unset when a receive
  // completes at once, and a blob of the wrong size must be an error. (Larger messages
  // fail anyway, as truncated.)
  if (exact_length) param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  // Match every bit: the tag names generation, step, op and chunk (comm/tag.h); the
  // chunk numbering makes the sender implicit.
  ucs_status_ptr_t req = ucp_tag_recv_nbx(worker_, data, bytes, tag, ~ucp_tag_t{0}, &param);
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
  // STYLE.md trap: freeing a receive does not stop UCX writing into its buffer; cancel it
  // and let test() see it finish.
  if (t.state != Transfer::State::pending || !t.is_recv || t.cancel_requested) return;
  t.cancel_requested = true;
  ucp_request_cancel(worker_, t.request);
}

unsigned UcxTransport::progress() { return ucp_worker_progress(worker_); }

bool UcxTransport::peer_failed(int peer, std::string* cause) const {
  const ucs_status_t e = peers_[peer]->error;
  if (e == UCS_OK) return false;
  if (cause) *cause = rf::str("endpoint error: ", ucs_status_string(e));
  return true;
}

}  // namespace rf::comm
