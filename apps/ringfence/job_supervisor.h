#pragma once
// The Supervisor behind run_supervisor (supervisor.h), shared by its three source files:
// supervisor.cpp (start, the loop, the end), supervisor_exits.cpp (a worker's exit and
// the restarts it leads to, the decisions being restart_policy.h's) and
// supervisor_status.cpp (the coordinator's status: phase, evictions, spares; launcher-side
// fault injection). Internal to the launcher.
#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/ringfence/not_fired.h"
#include "apps/ringfence/restart_policy.h"
#include "apps/ringfence/run_dir.h"
#include "apps/ringfence/status_line.h"
#include "apps/ringfence/worker_proc.h"
#include "base/clock.h"
#include "elastic/admin_client.h"
#include "elastic/coordinator.h"
#include "elastic/launch_options.h"
#include "elastic/replies.h"

namespace rf::apps {

class Supervisor {
 public:
  explicit Supervisor(const rf::elastic::RunOptions& o) : opt_(o) {}
  ~Supervisor();
  int run();

 private:
  // supervisor.cpp
  void start_workers();
  void spawn(WorkerProc& w);
  std::string error_file(const WorkerProc& w) const;
  WorkerProc* by_pid(pid_t pid);
  WorkerProc* by_slot(int slot);
  bool any_running() const;
  void kill_all(int sig);
  void note(const std::string& s) { status_.note(s); }
  void handle_signals(int& handled, std::optional<TimePoint>& stop_deadline);
  void loop();
  void await_last_leaves();
  int finish();
  void serve_other_launchers();
  static constexpr rf::Duration kServeOthersBound = std::chrono::seconds(30);
  int exit_code();
  void write_summary(const nlohmann::json& out, int& code);
  // supervisor_exits.cpp
  void reap();
  void on_exit(WorkerProc& w, pid_t pid, int code);
  void restart(WorkerProc& w, int code, bool held);
  int others_running(int slot) const;
  bool spare_available(const WorkerProc& dead) const;
  void release_held(const rf::elastic::StatusReply& st);
  std::string held_release_reason(WorkerProc& w, const rf::elastic::StatusReply& st, int finished_now,
                                  int& spares_missing, bool& next_spare);
  // supervisor_status.cpp
  void coord_lost(const std::string& why);
  void poll_status();
  void kill_evicted(const rf::elastic::StatusReply& st);
  void inject_due();
  void take_phase(const rf::elastic::StatusReply& st);
  void refresh_phase();
  bool phase_is(rf::elastic::Phase p) const { return last_status_.phase == p; }
  InjectRecord inject_record() const;

  rf::elastic::RunOptions opt_;
  std::string token_, coord_addr_;
  std::string error_dir_;  // where the workers' error files go ("" : none could be made)
  RunDir run_dir_;         // where the workers' flight records go (run_dir.h)
  std::unique_ptr<rf::elastic::Coordinator> coord_;
  std::unique_ptr<rf::elastic::AdminClient> admin_;
  std::vector<WorkerProc> workers_;
  TimePoint start_;
  std::optional<TimePoint> running_since_;
  int64_t start_wall_us_ = 0;
  bool stopping_ = false, job_over_ = false;
  std::string error_;
  int total_restarts_ = 0;
  std::set<size_t> fired_;                  // at= specs whose time came (executed, or skipped_)
  std::map<size_t, std::string> skipped_;   // at= specs not executed: why
  int64_t last_step_ = -1;                  // the highest step the coordinator's statuses showed (heartbeats')
  nlohmann::json injected_ = nlohmann::json::array();
  rf::elastic::StatusReply last_status_;
  RunningSnapshot snap_;
  std::set<std::pair<int, int64_t>> standby_;  // (slot, incarnation) the last status listed as standby
  std::optional<int> start_failure_;  // exit code: a worker ended before it registered
  std::vector<std::string> late_failures_;  // non-zero exits after the job was DONE, or after leaving it
  StatusLine status_{!opt_.quiet};
};

}  // namespace rf::apps
