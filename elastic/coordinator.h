#pragma once
// Coordinator — the TCP server around Membership and KvStore. One event loop
// thread owns everything: non-blocking sockets, poll(), a read buffer (FrameReader) and a
// write buffer per connection, and a timer tick. It never blocks on a client: a request
// that must wait (plan, ready, kv_wait) is parked on its connection with a deadline and
// answered by a later loop iteration. A malformed or oversized frame, a wrong token or a
// request before hello gets an error reply and the connection is closed.
//
// A member connection (the worker's heartbeat connection) closing is detection D1: the
// worker fails at once. Everything that happens is written to the event log.
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "elastic/membership_types.h"

namespace rf::elastic {

struct CoordinatorOptions {
  std::string host = "127.0.0.1";  // bind address; "0.0.0.0" for several machines
  int port = 0;                    // 0: an ephemeral port, see Coordinator::port()
  std::string token;               // required: the job token every connection presents
  MembershipOptions membership;
  std::string event_log;           // JSON-lines file; "" = none
  Duration tick = std::chrono::milliseconds(5);  // leases and deadlines are checked this often
  size_t max_connections = 4096;
  Duration hello_timeout = std::chrono::seconds(10);  // a connection silent this long is closed
};

class Coordinator {
 public:
  // Binds and listens at once (throws rf::Error when it cannot), so port() is valid and
  // clients may connect before start().
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();  // stop() and join
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  int port() const;
  void start();  // runs the loop on its own thread
  void run();    // runs the loop on the calling thread until stop()
  void stop();   // any thread; wakes the loop

  // Mirrors for the thread that owns the Coordinator object (updated by the loop).
  Phase phase() const { return static_cast<Phase>(phase_.load()); }
  bool finished() const { return phase() == Phase::Done || phase() == Phase::Stopped; }
  int launcher_connections() const { return launchers_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::atomic<int> phase_{0};
  std::atomic<int> launchers_{0};
};

}  // namespace rf::elastic
