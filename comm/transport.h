#pragma once
// Transport — the point-to-point contract the collectives are written against (Gloo's
// transport/ idea: algorithms on top, one subfolder per backend below). All calls come
// from the one thread that currently drives the communicator (see ucx/ucx_communicator.h).
//
// A Transfer is posted once and then polled with test() until it is finished; its buffer
// must stay valid until then. Tags are full 64-bit StepTag values and receives match all
// bits from the named peer.
#include <cstddef>
#include <cstdint>
#include <string>

namespace rf::comm {

struct Transfer {
  enum class State : uint8_t { idle, pending, done, failed };
  State state = State::idle;
  bool is_recv = false;
  int peer = -1;
  uint64_t tag = 0;
  size_t bytes = 0;
  void* request = nullptr;  // backend handle while pending
  bool cancel_requested = false;
  bool exact_length = false;
  std::string cause;        // why it failed
  // The backend's own per-transfer state, zeroed when the transfer is posted; its layout
  // is the backend's (UCX: its single-copy rendezvous, ucx/single_copy.h). Kept here so
  // that a transfer costs no allocation.
  alignas(8) unsigned char backend_state[96] = {};
  bool finished() const { return state == State::done || state == State::failed; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // bulk: both sides post this message with the same size and the same flag (collectives
  // do by construction; blobs pass false), so the transport may move it by a rendezvous of
  // its own instead of a plain message (UCX: a single-copy read between processes of one
  // host, ucx/single_copy.h).
  virtual void post_send(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag,
                         bool bulk = false) = 0;
  // exact_length: a message of another size fails the transfer (blobs); collectives'
  // sizes agree by construction, so they skip the check (it costs UCX a request).
  virtual void post_recv(Transfer& t, int peer, void* data, size_t bytes, uint64_t tag, bool exact_length,
                         bool bulk = false) = 0;
  // Returns true once t is done or failed.
  virtual bool test(Transfer& t) = 0;
  // Asks for a pending receive to end (it then finishes as failed, "cancelled"); for a
  // single-copy send, its wait for the Done. Idempotent.
  virtual void cancel(Transfer& t) = 0;
  // Drives the network; returns how many events it handled (0: idle).
  virtual unsigned progress() = 0;
  // How many endpoint failures were seen so far (cheap: polled by every wait loop).
  virtual int failure_count() const = 0;
  // Whether `peer`'s endpoint failed; `cause` says why.
  virtual bool peer_failed(int peer, std::string* cause) const = 0;
  // Ends every pending transfer now (receives cancelled, endpoints force-closed), so no
  // buffer is touched afterwards. Used when the communicator fails or is aborted.
  virtual void shut_down_transfers() = 0;
};

}  // namespace rf::comm
