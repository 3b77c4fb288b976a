#pragma once
// Connection — the client side of one coordinator connection: blocking request/reply
// over frames, every wait bounded by a deadline (poll), never a signal or an exit.
// Used by the worker's Client (two connections) and the launcher's AdminClient.
#include <string>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "elastic/errors.h"

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
  void close();
  bool connected() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

std::string hex_encode(const std::string& bytes);
std::string hex_decode(const std::string& hex);  // throws ProtocolError on bad input

}  // namespace rf::elastic
