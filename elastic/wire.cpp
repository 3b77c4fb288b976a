#include "elastic/wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "base/str.h"
#include "elastic/frame.h"

namespace rf::elastic {

using nlohmann::json;

std::pair<std::string, int> parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0)
    throw rf::InvalidInput(rf::str("'", text, "' is not HOST:PORT"));
  const char* b = text.data() + colon + 1;
  const char* e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, port);
  if (b == e || ec != std::errc() || p != e || port < 1 || port > 65535)
    throw rf::InvalidInput(rf::str("'", text, "' has no valid port (1..65535)"));
  return {text.substr(0, colon), port};
}

namespace {
// Rounded UP: poll() takes whole milliseconds, and a truncated wait would time out before
// the deadline (a heartbeat would then fence the worker up to 1 ms short of one lease, D4).
int remaining_ms(TimePoint deadline) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}
}  // namespace

void Connection::connect(const std::string& host, int port, TimePoint deadline, bool retry_refused) {
  close();
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    throw ConnectionLost(rf::str("cannot resolve coordinator host '", host, "'"));
  std::string last_error;
  // Retry refused connections until the deadline: the coordinator may still be starting.
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fd_ = fd;
      freeaddrinfo(res);
      return;
    }
    last_error = std::strerror(errno);
    const bool refused = errno == ECONNREFUSED;
    ::close(fd);
    if (Clock::now() >= deadline || (refused && !retry_refused)) break;
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, std::min(20, remaining_ms(deadline)));  // back off before retrying
  }
  freeaddrinfo(res);
  throw ConnectionLost(rf::str("cannot connect to the coordinator at ", host, ":", port, ": ", last_error));
}

bool Connection::peer_closed(int wait_ms) {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, wait_ms) <= 0) return false;
  char b;
  const ssize_t n = ::recv(fd_, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void Connection::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Connection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  reader_ = FrameReader();
}

json Connection::call(const json& request, TimePoint deadline) {
  send(request, deadline);
  if (std::optional<json> reply = receive(deadline)) return *std::move(reply);
  close();
  throw CallTimeout(rf::str("no reply from the coordinator to '", request.value("type", "?"), "' before the deadline"));
}

void Connection::send(const json& request, TimePoint deadline) {
  if (fd_ < 0) throw ConnectionLost("not connected to the coordinator");
  const std::string out = encode_frame(request);
  size_t sent = 0;
  const std::string type = request.value("type", "?");
  last_type_ = type;
  while (sent < out.size()) {
    ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, remaining_ms(deadline)) == 0) {
        close();
        throw CallTimeout(rf::str("sending '", type, "' to the coordinator timed out"));
      }
      continue;
    }
    close();
    throw ConnectionLost(rf::str("connection to the coordinator lost while sending '", type, "'"));
  }
}

std::optional<json> Connection::receive(TimePoint deadline, int wake_fd) {
  if (fd_ < 0) throw ConnectionLost("not connected to the coordinator");
  char buf[65536];
  while (true) {
    json reply;
    try {
      const std::optional<std::string> payload = reader_.next();
      if (payload) reply = parse_message(*payload);
    } catch (const ProtocolError&) {
      close();
      throw;
    }
    if (!reply.is_null()) {
      if (reply["type"] == "error") {
        close();
        const std::string what = rf::str("coordinator refused '", last_type_, "': ", reply.value("error", "?"));
        if (reply.value("code", "") == "finished") throw JobFinished(what);
        throw Refused(what);
      }
      return reply;
    }
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int pr = ::poll(p, wake_fd >= 0 ? 2 : 1, remaining_ms(deadline));
    if (pr == 0) return std::nullopt;
    if (pr < 0 && errno == EINTR) continue;
    if (wake_fd >= 0 && (p[1].revents & POLLIN)) return std::nullopt;
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      reader_.feed(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    close();
    throw ConnectionLost(rf::str("connection to the coordinator closed while waiting for the reply to '", last_type_, "'"));
  }
}

std::string hex_encode(const std::string& bytes) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) s += hex[c >> 4], s += hex[c & 15];
  return s;
}

std::string hex_decode(const std::string& hex) {
  if (hex.size() % 2) throw ProtocolError("hex value has an odd length");
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw ProtocolError(rf::str("'", c, "' is not a hex digit"));
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(nib(hex[2 * i]) * 16 + nib(hex[2 * i + 1]));
  return out;
}

}  // namespace rf::elastic
