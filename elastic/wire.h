#pragma once
// Connection — the client side of one coordinator connection: blocking request/reply
// over frames, every wait bounded by a deadline (poll), never a signal or an exit.
// Used by the worker's Client (two connections) and the launcher's AdminClient.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "elastic/errors.h"
#include "elastic/frame.h"

namespace rf::elastic {

// "host:port" -> (host, port); throws rf::InvalidInput naming the text.
std::pair<std::string, int> parse_host_port(const std::string& text);

class Connection {
 public:
  Connection() = default;
  ~Connection() { close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Throws ConnectionLost when the coordinator cannot be reached before the deadline. A
  // refused connection is tried again until then (the coordinator may still be starting),
  // unless retry_refused is false (a leader etcd names may be dead: look again instead).
  void connect(const std::string& host, int port, TimePoint deadline, bool retry_refused = true);
  // Sends one request and waits for its reply. Throws CallTimeout at the deadline,
  // ConnectionLost when the connection breaks, Refused on an "error" reply (the server
  // closes the connection after it). The connection is unusable after any throw.
  nlohmann::json call(const nlohmann::json& request, TimePoint deadline);
  // The two halves of call(), for a client that keeps several requests in flight (the
  // heartbeats, elastic/lease_renewal.h): replies come in the order of the requests.
  // send() writes one whole frame (CallTimeout at the deadline, ConnectionLost).
  // receive() returns the next reply, or nullopt at the deadline or as soon as `wake_fd`
  // (when >= 0) is readable; it throws as call() does, and a partial frame waits for the
  // next call.
  void send(const nlohmann::json& request, TimePoint deadline);
  std::optional<nlohmann::json> receive(TimePoint deadline, int wake_fd = -1);
  void close();
  // Ends a call() another thread is blocked in (it throws ConnectionLost); the connection
  // stays open until close(). Safe from any thread while the connection exists.
  void shutdown();
  // Whether the other side has closed the connection (end of file or reset), waiting up to
  // `wait_ms` for it. Data waiting to be read is not a close.
  bool peer_closed(int wait_ms);
  bool connected() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  FrameReader reader_;     // what arrived of the replies not yet returned
  std::string last_type_;  // of the last request sent, for the error a refusal throws
};

std::string hex_encode(const std::string& bytes);
std::string hex_decode(const std::string& hex);  // throws ProtocolError on bad input

}  // namespace rf::elastic
