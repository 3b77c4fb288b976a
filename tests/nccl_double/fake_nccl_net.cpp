// The fake NCCL's network: a full mesh of Unix stream sockets between the ranks of one
// communicator, named in the abstract namespace from the communicator's id and the rank
// (nothing to clean up), and the reader thread that files arriving messages.
//
// Connecting: every rank listens, connects to each lower rank (retrying while that rank
// does not listen yet: late peers are waited for, with no timeout of our own) and accepts
// each higher one, which introduces itself (hello: id, ranks). Sends never raise SIGPIPE
// (MSG_NOSIGNAL): a peer that exited or aborted is an error of the kernel, not a signal.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "tests/nccl_double/fake_nccl_comm.h"

namespace rf_fake_nccl {

namespace {

constexpr uint64_t kMaxMessage = uint64_t(1) << 36;

struct Hello {
  uint64_t magic, id;
  uint32_t from, to, nranks, pad;
};

socklen_t address(uint64_t id, int rank, sockaddr_un& a) {
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "rf-fake-nccl/%016llx/%d",
                              static_cast<unsigned long long>(id), rank);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<size_t>(n));
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

bool write_all(int fd, const void* data, size_t bytes, const std::atomic<bool>* abort_flag, std::string& err) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    if (abort_flag && abort_flag->load(std::memory_order_acquire)) {
      err.clear();
      return false;
    }
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, 10);
      continue;
    }
    err = errno_text("send");
    return false;
  }
  return true;
}

// One connection to lower rank `q`; -1 when cancelled; -2 with `err` on a socket error.
int connect_to(const ncclComm& c, int q, const std::function<bool()>& cancelled, std::string& err) {
  sockaddr_un a;
  const socklen_t len = address(c.id, q, a);
  for (;;) {
    if (cancelled()) return -1;
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno_text("socket");
      return -2;
    }
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), len) == 0) {
      const Hello h{kIdMagic, c.id, static_cast<uint32_t>(c.rank), static_cast<uint32_t>(q),
                    static_cast<uint32_t>(c.nranks), 0};
      if (write_all(fd, &h, sizeof h, nullptr, err)) return fd;
      ::close(fd);  // it went away between accept and hello: as if it was not there yet
    } else {
      const int e = errno;
      ::close(fd);
      if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR) {
        errno = e;
        err = errno_text("connect");
        return -2;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The hello of an accepted connection; its sender's rank, or -1 if it is not one of ours.
int read_hello(const ncclComm& c, int fd) {
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  Hello h{};
  if (::recv(fd, &h, sizeof h, MSG_WAITALL) != static_cast<ssize_t>(sizeof h)) return -1;
  if (h.magic != kIdMagic || h.id != c.id || h.to != static_cast<uint32_t>(c.rank) ||
      h.nranks != static_cast<uint32_t>(c.nranks) || h.from <= static_cast<uint32_t>(c.rank) ||
      h.from >= static_cast<uint32_t>(c.nranks))
    return -1;
  return static_cast<int>(h.from);
}

void mark_dead(ncclComm& c, int peer, const std::string& why) {
  std::lock_guard lk(c.mu);
  c.peers[static_cast<size_t>(peer)].dead = true;
  c.peers[static_cast<size_t>(peer)].why = why;
  c.cv.notify_all();
}

// Reads what `peer` has sent so far; files complete messages.
void drain(ncclComm& c, int peer) {
  Peer& p = c.peers[static_cast<size_t>(peer)];
  for (;;) {
    char* at = p.in_payload ? p.payload.data() + p.got : reinterpret_cast<char*>(&p.h) + p.got;
    const size_t want = (p.in_payload ? p.payload.size() : sizeof p.h) - p.got;
    const ssize_t n = ::recv(p.fd, at, want, MSG_DONTWAIT);
    if (n == 0) return mark_dead(c, peer, "connection closed (the peer exited or tore its communicator down)");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      return mark_dead(c, peer, errno_text("recv"));
    }
    p.got += static_cast<size_t>(n);
    if (!p.in_payload && p.got == sizeof p.h) {
      if (p.h.magic != kMsgMagic || p.h.bytes > kMaxMessage || p.h.kind > kP2p)
        return mark_dead(c, peer, "a message with a bad header");
      p.payload.assign(p.h.bytes, 0);
      p.in_payload = true;
      p.got = 0;
    }
    if (p.in_payload && p.got == p.payload.size()) {
      std::lock_guard lk(c.mu);
      p.queue[p.h.kind].push_back(Message{p.h, std::move(p.payload)});
      p.payload = {};
      p.in_payload = false;
      p.got = 0;
      c.cv.notify_all();
    }
  }
}

void reader_main(ncclComm* c) {
  std::vector<pollfd> fds;
  std::vector<int> who;
  while (!c->reader_stop.load(std::memory_order_acquire)) {
    fds.assign(1, pollfd{c->wake_fd, POLLIN, 0});
    who.assign(1, -1);
    for (size_t q = 0; q < c->peers.size(); ++q) {
      const Peer& p = c->peers[q];
      bool dead;
      {
        std::lock_guard lk(c->mu);
        dead = p.dead;
      }
      if (p.fd >= 0 && !dead) {
        fds.push_back(pollfd{p.fd, POLLIN, 0});
        who.push_back(static_cast<int>(q));
      }
    }
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) drain(*c, who[i]);
  }
}

}  // namespace

ncclResult_t connect_mesh(ncclComm& c, const std::function<bool()>& cancelled, std::string& err) {
  std::vector<int> fds(static_cast<size_t>(c.nranks), -1);
  auto fail = [&](ncclResult_t r, int listener) {
    for (int& fd : fds)
      if (fd >= 0) ::close(fd);
    if (listener >= 0) ::close(listener);
    return r;
  };
  const int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (lfd < 0) {
    err = errno_text("socket");
    return ncclSystemError;
  }
  sockaddr_un a;
  const socklen_t len = address(c.id, c.rank, a);
  if (::bind(lfd, reinterpret_cast<const sockaddr*>(&a), len) != 0 || ::listen(lfd, 64) != 0) {
    err = errno_text("bind/listen on @rf-fake-nccl") + " (the same unique id and rank used twice?)";
    return fail(ncclSystemError, lfd);
  }
  for (int q = 0; q < c.rank; ++q) {
    const int fd = connect_to(c, q, cancelled, err);
    if (fd == -1) return fail(ncclInternalError, lfd);
    if (fd < 0) return fail(ncclSystemError, lfd);
    fds[static_cast<size_t>(q)] = fd;
  }
  for (int need = c.nranks - 1 - c.rank; need > 0;) {
    if (cancelled()) return fail(ncclInternalError, lfd);
    pollfd pf{lfd, POLLIN, 0};
    if (::poll(&pf, 1, 10) <= 0) continue;
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int from = read_hello(c, fd);
    if (from < 0 || fds[static_cast<size_t>(from)] >= 0) {
      std::fprintf(stderr, "fake-nccl rank %d: dropped a connection that is not a peer of this communicator\n", c.rank);
      ::close(fd);
      continue;
    }
    fds[static_cast<size_t>(from)] = fd;
    --need;
  }
  ::close(lfd);
  c.peers.assign(static_cast<size_t>(c.nranks), Peer{});
  for (size_t q = 0; q < fds.size(); ++q) {
    if (fds[q] >= 0) ::fcntl(fds[q], F_SETFL, ::fcntl(fds[q], F_GETFL) | O_NONBLOCK);
    c.peers[q].fd = fds[q];
  }
  return ncclSuccess;
}

void start_reader(ncclComm& c) {
  c.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  c.reader = std::thread(reader_main, &c);
}

void stop_reader(ncclComm& c) {
  if (c.reader.joinable()) {
    c.reader_stop.store(true, std::memory_order_release);
    const uint64_t one = 1;
    if (::write(c.wake_fd, &one, sizeof one) < 0) {
      // the reader polls with a timeout: it sees reader_stop within 100 ms anyway
    }
    c.reader.join();
  }
  if (c.wake_fd >= 0) ::close(c.wake_fd);
  c.wake_fd = -1;
  for (Peer& p : c.peers) {
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }
}

bool send_message(ncclComm& c, int peer, const Header& h, const void* data, std::string& err) {
  const int fd = c.peers[static_cast<size_t>(peer)].fd;
  return write_all(fd, &h, sizeof h, &c.abort_flag, err) &&
         (h.bytes == 0 || write_all(fd, data, h.bytes, &c.abort_flag, err));
}

}  // namespace rf_fake_nccl
