#pragma once
// The coordinator's state and its event loop's parts (elastic/coordinator.h), internal to
// the coordinator's three source files: coordinator.cpp (sockets, the loop, connections),
// coordinator_requests.cpp (admission and the requests) and coordinator_commit.cpp (the
// state a leading replica commits). One thread (the loop) touches all of it.
#include <atomic>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "elastic/checkpoint_health.h"
#include "elastic/control_state.h"
#include "elastic/coordinator.h"
#include "elastic/coordinator_replies.h"
#include "elastic/event_log.h"
#include "elastic/frame.h"
#include "elastic/kv_store.h"
#include "elastic/leadership.h"
#include "elastic/membership.h"
#include "elastic/messages.h"

namespace rf::elastic {

struct Coordinator::Impl {
  struct Pending {
    Request req;
    TimePoint deadline;
  };
  struct Conn {
    int fd = -1;
    std::string peer;
    FrameReader reader;
    std::string out;
    bool hello = false;                // admitted: the challenge was answered
    std::optional<Hello> challenged;   // hello received, challenge sent, auth awaited
    std::string server_nonce;
    Role role = Role::Caller;
    WorkerId worker;
    bool closing = false;  // flush `out`, then close
    bool dead = false;
    bool lost_reported = false;
    TimePoint accepted_at;  // connection_lost() called exactly once per member connection
    std::optional<Pending> pending;
    std::list<Conn>::iterator self;  // its place in `conns`
    std::multimap<TimePoint, Conn*>::iterator deadline_at;  // while parked
    std::optional<std::multimap<std::pair<uint64_t, std::string>, Conn*>::iterator> kv_waiting;
    bool touched = false;  // in `touched` this loop turn
    bool polls_out = false;  // registered for EPOLLOUT (output waits for the socket)
  };

  // With a Leadership: what the previous leader committed (loaded before anything else).
  std::optional<ControlState> prev_state;
  std::vector<std::tuple<uint64_t, std::string, std::string>> prev_kv;
  CoordinatorOptions opt;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  int bound_port = 0;
  int epoll_fd = -1;
  std::atomic<bool> stopping{false};
  Membership membership;
  KvStore kv;
  EventLog log;
  // The loop's work is proportional to what happened, not to the connections: epoll names
  // the sockets with events, `touched` the connections read, written or answered this turn
  // (only they can have output or be finished), `unadmitted` those without a hello yet
  // (their deadline, at each tick). A parked request is looked at only when its answer may
  // have changed: a plan or a ready when the generation, the phase or the round's plan did
  // (parked_key) or a transition other than a report, a ready or a join was logged (a
  // failure, an eviction, a leave), a kv_wait when its key was written, any of them at its
  // deadline.
  std::list<Conn> conns;
  std::vector<Conn*> touched;
  std::unordered_set<Conn*> parked, unadmitted;
  std::multimap<TimePoint, Conn*> deadlines;
  std::multimap<std::pair<uint64_t, std::string>, Conn*> kv_waiters;
  std::vector<std::pair<uint64_t, std::string>> kv_written;  // this turn
  std::tuple<uint64_t, int, bool> parked_key{0, -1, false};
  std::pair<uint64_t, std::string> plan_frame{0, {}};  // a generation's plan reply, encoded once
  TimePoint next_tick;
  std::map<int, Progress> progress;  // the live line's figures, by slot (coordinator_replies.h)
  CheckpointHealth ckpt_health;      // disk checkpoints the writers could not write (heartbeats, leaves)
  int64_t wall_offset_us;
  uint64_t last_generation = 0;
  std::vector<nlohmann::json> evictions;  // history, for launchers
  Coordinator* owner;

  // The committed state (with a Leadership): leaders, what was last committed, the store
  // writes not committed yet, why leadership was lost.
  std::vector<LeaderTerm> leaders;
  std::string committed;
  std::optional<std::tuple<uint64_t, int, bool>> committed_key;  // (generation, phase, round planned)
  uint64_t committed_generation = 0;  // what the last commit held, for the event log
  std::optional<Phase> committed_phase;
  std::vector<EtcdOp> uncommitted;
  std::string lost_reason;

  // coordinator.cpp: the server (sockets, the loop, connections)
  static std::optional<ControlState> load_state(Leadership* lead);
  static std::vector<std::tuple<uint64_t, std::string, std::string>> load_kv(Leadership* lead);
  static CoordinatorOptions prepared(CoordinatorOptions o, const std::optional<ControlState>& prev);
  Impl(CoordinatorOptions o, Coordinator* self);
  ~Impl();
  int64_t wall(TimePoint t) const;
  void send(Conn& c, nlohmann::json reply);
  void send_frame(Conn& c, const std::string& frame);  // already encoded
  void send_error(Conn& c, const std::string& what, const char* code = "refused");
  void run();
  void accept_all();
  void read_from(Conn& c);
  void report_lost(Conn& c, TimePoint now);
  void write_to(Conn& c);
  void process_frames(Conn& c);
  void touch(Conn& c);
  void watch_output(Conn& c);
  void after_events(TimePoint now, bool tick_due);
  void finish(Conn& c, TimePoint now);
  void park(Conn& c, TimePoint now);
  void unpark(Conn& c);
  void answer_parked(TimePoint now, bool tick_due, bool moved);

  // coordinator_requests.cpp: admission and requests
  void note_checkpoints(WorkerId w, uint64_t g, int64_t s, std::optional<int64_t> failed, const std::string& error);
  void handle(Conn& c, const Request& req, TimePoint now);
  void check_allowed(const Conn& c, const Request& req) const;
  // One handler per request an admitted connection may send.
  void on(Conn& c, const Heartbeat& r, TimePoint now);
  void on(Conn& c, const Report& r, TimePoint now);
  void on(Conn& c, const PlanRequest& r, TimePoint now);
  void on(Conn& c, const Ready& r, TimePoint now);
  void on(Conn& c, const KvWait& r, TimePoint now);
  void on(Conn& c, const KvSet& r, TimePoint now);
  void on(Conn& c, const KvGet& r, TimePoint now);
  void on(Conn& c, const KvCas& r, TimePoint now);
  void on(Conn& c, const FailureReport& r, TimePoint now);
  void on(Conn& c, const PhaseTiming& r, TimePoint now);
  void on(Conn& c, const Leave& r, TimePoint now);
  void on(Conn& c, const Status& r, TimePoint now);
  void on(Conn& c, const Exited& r, TimePoint now);
  void on(Conn& c, const StopJob& r, TimePoint now);
  void on(Conn& c, const Summary& r, TimePoint now);
  void on(Conn& c, const Fatal& r, TimePoint now);
  void on(Conn& c, const Injected& r, TimePoint now);
  void challenge(Conn& c, const Hello& h);
  void handle_auth(Conn& c, const Auth& a, TimePoint now);
  void handle_hello(Conn& c, const Hello& h, TimePoint now);
  bool try_pending(Conn& c, TimePoint now);

  // coordinator_commit.cpp: the committed state (with a Leadership)
  ControlState control_state() const;
  bool commit_if_changed();
  void lose(const std::string& why);
};

}  // namespace rf::elastic
