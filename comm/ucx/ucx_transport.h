#pragma once
// UcxTransport — the Transport contract on one UCP worker and one endpoint per peer, for
// ONE generation (docs/protocol.md "tag": a new worker per generation fences old messages
// out). Endpoints use error-handling mode PEER, so a dead peer completes our requests
// with an error instead of hanging; the error callback only records (first failure wins).
//
// Threading: the worker is created UCS_THREAD_MODE_SERIALIZED: any thread may call in,
// one at a time. UcxCommunicator guarantees that with its driver lock; nothing here locks.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "base/clock.h"
#include "comm/tag.h"
#include "comm/transport.h"
#include "comm/ucx/single_copy.h"
#include "comm/ucx/ucx_context.h"

namespace rf::comm {

class UcxTransport : public Transport {
 public:
  // Every tag goes on the wire as key.wire(tag) (comm/tag.h): keyed, a message from whoever
  // lacks the key matches no receive of ours.
  UcxTransport(std::shared_ptr<UcxContext> context, int rank, int world, TagKey key = {});
  ~UcxTransport() override;  // closes what is still open (forcefully) and the worker

  std::vector<uint8_t> address() const { return address_; }
  // Creates one endpoint per peer from the published worker addresses (index = rank).
  void connect(const std::vector<std::vector<uint8_t>>& addresses);
  // Closes every endpoint: flushing (pending data delivered) unless `force`, each close
  // bounded by `deadline`; then endpoints are gone and peers see us disconnect.
  void close_endpoints(bool force, TimePoint deadline);

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void post_send(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag,
                 bool bulk = false) override;
  void post_recv(Transfer& t, int peer, void* data, size_t bytes, uint64_t tag, bool exact_length,
                 bool bulk = false) override;
  bool test(Transfer& t) override;
  void cancel(Transfer& t) override;
  unsigned progress() override;
  int failure_count() const override { return failures_; }
  bool peer_failed(int peer, std::string* cause) const override;
  // Releases every buffer offered for single-copy reads first (hold word cleared), then
  // ends what UCX has in flight.
  void shut_down_transfers() override;

  // Single-copy path (single_copy.h). The hold word is what peers probe and check.
  uint64_t hold_address() const { return reinterpret_cast<uint64_t>(&hold_word_); }
  uint64_t hold_token() const { return hold_token_; }
  // From the connect-time probe: `send_ok` = peer can read us, `recv_ok` = we can read it.
  void set_single_copy(int peer, int64_t pid, bool send_ok, bool recv_ok);
  // Messages of at least this many bytes take the single-copy path (0: never).
  void set_single_copy_bytes(size_t bytes) { single_copy_bytes_ = bytes; }
  uint64_t single_copy_reads() const { return single_copy_reads_; }
  void release_offered_buffers() { hold_word_.store(0, std::memory_order_seq_cst); }

 private:
  struct Peer {
    UcxTransport* self = nullptr;
    int rank = -1;
    ucp_ep_h ep = nullptr;
    ucs_status_t error = UCS_OK;
    int64_t pid = 0;
    bool sc_send = false, sc_recv = false;
  };
  bool test_single_copy(Transfer& t);
  bool test_single_copy_send(Transfer& t);
  bool test_single_copy_offer(Transfer& t);
  std::string read_offered(Transfer& t, const SingleCopyOffer& offer, size_t length);
  void fail(Transfer& t, ucs_status_t st, const char* what);
  void send_ctrl(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag, void** request);
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  std::shared_ptr<UcxContext> context_;
  int rank_, world_;
  TagKey key_;
  ucp_worker_h worker_ = nullptr;
  std::vector<uint8_t> address_;
  std::vector<std::unique_ptr<Peer>> peers_;
  int failures_ = 0;
  uint64_t hold_token_;
  std::atomic<uint64_t> hold_word_;  // hold_token_ while offered buffers are held, 0 after
  size_t single_copy_bytes_ = 0;
  uint64_t single_copy_reads_ = 0;
};

}  // namespace rf::comm
