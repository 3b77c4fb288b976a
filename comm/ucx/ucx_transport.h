#pragma once
// UcxTransport — the Transport contract on one UCP worker and one endpoint per peer, for
// ONE generation (PROTOCOL.md "tag": a new worker per generation fences old messages
// out). Endpoints use error-handling mode PEER, so a dead peer completes our requests
// with an error instead of hanging; the error callback only records (first failure wins).
//
// Threading: the worker is created UCS_THREAD_MODE_SERIALIZED: any thread may call in,
// one at a time. UcxCommunicator guarantees that with its driver lock; nothing here locks.
#include <memory>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "base/clock.h"
#include "comm/transport.h"
#include "comm/ucx/ucx_context.h"

namespace rf::comm {

class UcxTransport : public Transport {
 public:
  UcxTransport(std::shared_ptr<UcxContext> context, int rank, int world);
  ~UcxTransport() override;  // closes what is still open (forcefully) and the worker

  std::vector<uint8_t> address() const { return address_; }
  // Creates one endpoint per peer from the published worker addresses (index = rank).
  void connect(const std::vector<std::vector<uint8_t>>& addresses);
  // Closes every endpoint: flushing (pending data delivered) unless `force`, each close
  // bounded by `deadline`; then endpoints are gone and peers see us disconnect.
  void close_endpoints(bool force, TimePoint deadline);

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  void post_send(Transfer& t, int peer, const void* data, size_t bytes, uint64_t tag) override;
  void post_recv(Transfer& t, int peer, void* data, size_t bytes, uint64_t tag, bool exact_length) override;
  bool test(Transfer& t) override;
  void cancel(Transfer& t) override;
  unsigned progress() override;
  int failure_count() const override { return failures_; }
  bool peer_failed(int peer, std::string* cause) const override;
  void shut_down_transfers() override { close_endpoints(true, Clock::now() + std::chrono::milliseconds(5)); }

 private:
  struct Peer {
    UcxTransport* self = nullptr;
    int rank = -1;
    ucp_ep_h ep = nullptr;
    ucs_status_t error = UCS_OK;
  };
  static void on_endpoint_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  std::shared_ptr<UcxContext> context_;
  int rank_, world_;
  ucp_worker_h worker_ = nullptr;
  std::vector<uint8_t> address_;
  std::vector<std::unique_ptr<Peer>> peers_;
  int failures_ = 0;
};

}  // namespace rf::comm
