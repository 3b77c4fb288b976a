#pragma once
// Coordinator — the TCP server around Membership and KvStore. One event loop
// thread owns everything: non-blocking sockets, epoll, a read buffer (FrameReader) and a
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

class Leadership;

struct CoordinatorOptions {
  std::string host = "127.0.0.1";  // bind address; "0.0.0.0" for several machines
  int port = 0;                    // 0: an ephemeral port, see Coordinator::port()
  std::string token;               // required: the job token every connection presents
  MembershipOptions membership;
  std::string event_log;           // JSON-lines file; "" = none
  Duration tick = std::chrono::milliseconds(5);  // leases and deadlines are checked this often
  // Connections beyond this are closed at once (a bound on what strangers can make us
  // hold). 0: 4096 or four per member of the target world, whichever is more (a worker holds
  // two, launchers, spares and status calls the rest); the process's open-file limit is
  // raised to its hard limit to match.
  size_t max_connections = 0;
  Duration hello_timeout = std::chrono::seconds(10);  // a connection silent this long is closed
  // One of several replicas (`ringfence coord --etcd`): the elected leader's hold on etcd
  // (elastic/leadership.h). The coordinator then continues from the state the previous
  // leader committed (the next generation, the job id, the store), and commits every change
  // of generation, phase, members or plan, and every store write, before any reply that
  // depends on it leaves. When leadership is lost it stops serving at once and closes every
  // connection (lost_leadership()). nullptr: the single, embedded coordinator.
  std::shared_ptr<Leadership> leadership;
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
  // With a Leadership: it was lost and the coordinator stopped serving (lost_reason() says
  // why). The object is then done; a replica campaigns again with a new one.
  bool lost_leadership() const { return lost_.load(); }
  std::string lost_reason() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::atomic<int> phase_{0};
  std::atomic<int> launchers_{0};
  std::atomic<bool> lost_{false};
};

}  // namespace rf::elastic
