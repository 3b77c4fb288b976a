#include "comm/ucx/hello_all.h"

#include "base/error.h"
#include "base/str.h"
#include "comm/ucx/single_copy.h"

namespace rf::comm {

bool HelloAll::plan(int, uint64_t k, Round& r) {
  const uint64_t per_pass = static_cast<uint64_t>(world_ - 1);
  if (per_pass == 0 || k >= (3 + kWarmPasses) * per_pass) return false;
  const uint64_t pass = k / per_pass;
  const int d = static_cast<int>(k % per_pass) + 1;
  r = Round{};
  r.chunk = static_cast<uint32_t>(k + 1);
  r.send_peer = (rank_ + d) % world_;
  r.recv_peer = (rank_ - d + world_) % world_;
  if (pass == 0) {
    r.send_data = &me_;
    r.recv_data = &got_[r.recv_peer];
    r.send_bytes = r.recv_bytes = sizeof(Identity);
  } else if (pass == 1) {  // "I can read you": sent after every probe of pass 0 is done
    r.send_data = &can_read_[r.send_peer];
    r.recv_data = &peer_reads_me_[r.recv_peer];
    r.send_bytes = r.recv_bytes = sizeof(uint64_t);
  } else if (pass == 2) {
    // "I map every peer and every peer maps me": the shared-memory path is all-to-all, so
    // it is on only if every rank says so (every rank then decides alike).
    if (k == 2 * per_pass) {
      shm_ok_out_ = shm_ != nullptr ? 1 : 0;
      for (int p = 0; p < world_; ++p) {
        if (p != rank_ && !((can_read_[p] & kMapsShm) && (peer_reads_me_[p] & kMapsShm))) shm_ok_out_ = 0;
      }
    }
    r.send_data = &shm_ok_out_;
    r.recv_data = &shm_ok_in_[r.recv_peer];
    r.send_bytes = r.recv_bytes = sizeof(uint64_t);
  } else {
    // Warming faults in the pages of a FIFO two ranks of one host share; a peer on another
    // host has none (every identity arrived in pass 0, so both ends skip the same pairs).
    // Across a network the passes would only cost round trips, and on a lossy link each
    // lost last segment waits for TCP's retransmission timer: seconds of connecting.
    if (got_[r.send_peer].host != me_.host) r.send_peer = -1;
    if (got_[r.recv_peer].host != me_.host) r.recv_peer = -1;
    r.send_data = warm_out_.data();
    r.recv_data = warm_in_.data();
    r.send_bytes = r.recv_bytes = kWarmBytes;
  }
  return true;
}
void HelloAll::complete(int, uint64_t k, const Round& r) {
  if (k >= static_cast<uint64_t>(world_ - 1)) return;
  const Identity& id = got_[r.recv_peer];
  if (id.rank != r.recv_peer) {
    throw rf::InvalidInput(rf::str("connect: rank ", r.recv_peer, " introduced itself as ", id.rank));
  }
  // Another host (comm/host_identity.h) may share this kernel's memory, but a network
  // separates them: no shared-memory path and no single copy between them.
  const bool same_host = id.host == me_.host;
  if (shm_ != nullptr && !same_host) {
    if (shm_failure_.empty()) shm_failure_ = rf::str("rank ", r.recv_peer, ": it is on another host");
  } else if (shm_ != nullptr && id.shm_fd >= 0 && id.shm_fd <= INT32_MAX) {
    const std::string why = shm_->attach(r.recv_peer, static_cast<pid_t>(id.pid), static_cast<int>(id.shm_fd),
                                         id.shm_token);
    if (why.empty()) can_read_[r.recv_peer] |= kMapsShm;
    else if (shm_failure_.empty()) shm_failure_ = rf::str("rank ", r.recv_peer, ": ", why);
  } else if (shm_ != nullptr && shm_failure_.empty()) {
    shm_failure_ = rf::str("rank ", r.recv_peer, ": it has the shared-memory path off");
  }
  if (!probe_ || !same_host) return;  // across hosts UCX carries every byte: nothing to report
  // A pair takes the path only if both ends use it with the same threshold: then every
  // message's "offer or bytes" is decided alike on both sides (else FIFOs, logged).
  std::string why;
  if (id.single_copy_bytes != me_.single_copy_bytes) {
    why = rf::str("it uses single_copy_bytes ", id.single_copy_bytes, ", this rank ", me_.single_copy_bytes);
  } else if (id.single_copy_max_bytes != me_.single_copy_max_bytes) {
    why = rf::str("it uses single_copy_max_bytes ", id.single_copy_max_bytes, ", this rank ",
                  me_.single_copy_max_bytes);
  } else {
    uint64_t v = 0;
    why = read_remote(static_cast<pid_t>(id.pid), &v, id.hold_address, sizeof(v));
    if (why.empty() && v != id.hold_token) why = "probe read the wrong value (another host?)";
  }
  if (why.empty()) can_read_[r.recv_peer] |= kReadsSingleCopy;
  if (!why.empty() && probe_failure_.empty()) probe_failure_ = rf::str("rank ", r.recv_peer, ": ", why);
}

}  // namespace rf::comm
