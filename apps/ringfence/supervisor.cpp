#include "apps/ringfence/supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "apps/ringfence/control_plane.h"
#include "apps/ringfence/job_summary.h"
#include "apps/ringfence/not_fired.h"
#include "apps/ringfence/restart_policy.h"
#include "apps/ringfence/status_line.h"
#include "apps/ringfence/trace_merge.h"
#include "apps/ringfence/worker_env.h"
#include "apps/ringfence/worker_proc.h"
#include "base/clock.h"
#include "base/str.h"
#include "elastic/admin_client.h"
#include "elastic/coordinator.h"
#include "elastic/error_file.h"
#include "elastic/etcd_client.h"
#include "elastic/token.h"
#include "elastic/wire.h"

extern char** environ;

namespace rf::apps {

using nlohmann::json;
using namespace rf::elastic;

namespace {

volatile sig_atomic_t g_signals = 0;
void on_signal(int) { g_signals = g_signals + 1; }

class Supervisor {
 public:
  explicit Supervisor(const RunOptions& o) : opt_(o) {}
  ~Supervisor() {
    std::error_code ec;
    if (!error_dir_.empty()) std::filesystem::remove_all(error_dir_, ec);
  }

  int run() {
    const int world = opt_.nprocs * opt_.nnodes;
    if (!opt_.trace.empty()) prepare_trace_parts(opt_.trace);
    ControlPlane cp = connect_control_plane(opt_, coordinator_event_log(opt_));
    coord_ = std::move(cp.embedded);
    admin_ = std::move(cp.admin);
    token_ = cp.token;
    coord_addr_ = cp.coord_addr;

    // Slots: this node's primaries, then its spares after every node's primaries.
    for (int i = 0; i < opt_.nprocs; ++i) {
      WorkerProc w;
      w.slot = opt_.node_rank * opt_.nprocs + i;
      w.local_rank = i;
      workers_.push_back(w);
    }
    for (int i = 0; i < opt_.spares; ++i) {
      WorkerProc w;
      w.slot = world + opt_.node_rank * opt_.spares + i;
      w.local_rank = opt_.nprocs + i;
      w.spare = true;
      workers_.push_back(w);
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    // The workers' error files (elastic/error_file.h), removed with the supervisor.
    char error_dir[] = "/tmp/ringfence-errors-XXXXXX";
    if (::mkdtemp(error_dir)) error_dir_ = error_dir;  // without it, exits are judged by status alone
    start_ = rf::Clock::now();
    start_wall_us_ = rf::wall_us();
    for (auto& w : workers_) {
      spawn(w);
      w.spawns.push_back({{"incarnation", w.incarnation}, {"wall_us", rf::wall_us()}, {"reason", "start"}});
    }
    loop();
    return finish();
  }

 private:
  void spawn(WorkerProc& w) {
    std::vector<std::string> env = worker_environment(
        {.coord = coord_addr_, .etcd = opt_.etcd, .job = opt_.job, .token = token_, .slot = w.slot, .incarnation = w.incarnation,
         .world = opt_.nprocs * opt_.nnodes, .node_rank = opt_.node_rank, .spare = w.spare,
         .local_rank = w.local_rank, .local_world = static_cast<int>(workers_.size()), .job_ran = snap_.seen,
         .inject = join_fault_specs(opt_.inject),
         .trace = opt_.trace.empty() ? "" : trace_part_path(opt_.trace, w.slot, w.incarnation),
         .error_file = error_file(w)},
        environ);
    w.pid = spawn_process(opt_.program, std::move(env));
  }

  std::string error_file(const WorkerProc& w) const {
    return error_dir_.empty() ? "" : rf::str(error_dir_, "/error-", w.slot, "-", w.incarnation);
  }

  WorkerProc* by_pid(pid_t pid) {
    for (auto& w : workers_)
      if (w.pid == pid) return &w;
    return nullptr;
  }
  WorkerProc* by_slot(int slot) {
    for (auto& w : workers_)
      if (w.slot == slot) return &w;
    return nullptr;
  }
  bool any_running() const {
    for (auto& w : workers_)
      if (w.pid > 0) return true;
    return false;
  }
  void kill_all(int sig) {
    for (auto& w : workers_)
      if (w.pid > 0) ::kill(-w.pid, sig);
  }

  void reap() {
    int st = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
      WorkerProc* w = by_pid(pid);
      if (!w) continue;
      const int code = exit_status_of(st);
      const int64_t wall = rf::wall_us();
      w->exits.push_back({{"incarnation", w->incarnation}, {"status", code}, {"wall_us", wall}});
      const std::string said = error_dir_.empty() ? "" : take_error_file(error_file(*w));
      if (code != 0) w->errors.push_back(said);
      if (!said.empty()) w->exits.back()["error"] = said;
      w->pid = -1;
      ::kill(-pid, SIGKILL);  // anything the worker left behind in its group
      // D1, as seen by the launcher; the reply says what the coordinator knew of it.
      AdminClient::ExitedReply known;
      try {
        known = admin_->exited(w->slot, w->incarnation, code, wall);
      } catch (const rf::Error& e) {
        coord_lost(e.what());
      }
      // It may have left a job now DONE, or STOPPED it (a fatal error it reported, a digest
      // mismatch): the reply's phase says so, the status the error.
      if (code != 0 && !job_over_ && (known.phase == "DONE" || known.phase == "STOPPED")) refresh_phase();
      if (code != 0 && last_status_.value("phase", "") == "DONE") {
        // Every member had left: nothing to restart, but the job's end was not clean.
        late_failures_.push_back(rf::str("slot ", w->slot, " (incarnation ", w->incarnation, ") exited with status ",
                                         code, " after the job was DONE"));
        note(late_failures_.back());
      } else if (code != 0 && known.left && !job_over_) {
        // It had left the job (finished its steps, or stopped) and failed afterwards: the
        // job no longer counts on it, and a restart would join a job it already finished.
        late_failures_.push_back(rf::str("slot ", w->slot, " (incarnation ", w->incarnation, ") exited with status ",
                                         code, " after it left the job"));
        note(late_failures_.back() + ": not restarted");
        w->done = true;
        continue;
      }
      if (code == 0 || stopping_ || job_over_) {
        w->done = true;
        continue;
      }
      // Before the job first ran, a worker that never reached the coordinator (its join was
      // never accepted, as the coordinator says). Killed by a signal (the OOM killer, a
      // `kill -9` while it started), it crashed like any other worker: restarted below. An
      // error status may be a program that cannot start (a bad flag, a missing file), which
      // fails the same way every time: it is restarted once, and the next incarnation of
      // the slot failing the same way ends the job with its own status, said once.
      const bool start_error = !snap_.seen && !known.registered && code > 0;
      if (start_error && (w->start_error || w->restarts >= opt_.max_restarts)) {
        start_failure_ = code;
        error_ = rf::str("slot ", w->slot, " (incarnation ", w->incarnation, ") exited with status ", code,
                         " before it registered with the coordinator",
                         w->start_error ? rf::str(", as incarnation ", w->incarnation - 1, " did")
                                        : rf::str(" and has no restarts left (--max-restarts ", opt_.max_restarts, ")"),
                         ": not restarted, the job ends (its output above says why)");
        job_over_ = true;
        w->done = true;
        kill_all(SIGKILL);
        continue;
      }
      w->start_error = start_error;
      if (start_error)
        note(rf::str("slot ", w->slot, " (incarnation ", w->incarnation, ") exited with status ", code,
                     " before it registered with the coordinator: restarted once (the same again ends the job)"));
      else if (!snap_.seen && !known.registered && w->restarts < opt_.max_restarts)
        note(rf::str("slot ", w->slot, " (incarnation ", w->incarnation, ") was killed by signal ", -code,
                     " before it registered with the coordinator: restarted"));
      const RestartDecision d = decide_restart({.slot = w->slot, .errors = w->errors, .restarts = w->restarts,
                                                .max_restarts = opt_.max_restarts, .others = others_running(w->slot),
                                                .min_world = opt_.min_world > 0 ? opt_.min_world : opt_.nprocs * opt_.nnodes});
      if (d.action != RestartAction::Restart) {
        w->done = true;
        if (d.action == RestartAction::NoRestartsLeft)
          std::fprintf(stderr, "\nringfence: slot %d exited with status %d and has no restarts left (--max-restarts %d)\n",
                       w->slot, code, opt_.max_restarts);
        if (d.action == RestartAction::GoOnWithout) note(d.reason);
        if (d.action == RestartAction::StopJob) {
          error_ = d.reason;
          job_over_ = true;
          kill_all(SIGKILL);
        }
        continue;
      }
      ++w->restarts;
      ++total_restarts_;
      const bool was_member = w->evicted_finished ? w->evicted_was_member
                                                  : snap_.members.count({w->slot, w->incarnation}) > 0;
      const int finished = w->evicted_finished ? *w->evicted_finished : snap_.finished;
      w->evicted_finished.reset();
      ++w->incarnation;  // comes back as a replacement: same slot, new incarnation
      if (was_member && spare_available(*w)) {
        w->held = WorkerProc::Held{rf::Clock::now(), finished, std::nullopt};
        note(rf::str("slot ", w->slot, " exited (status ", code, "): a spare takes its place; its restart (incarnation ",
                     w->incarnation, ", the next spare) waits until the recovery has completed"));
        continue;
      }
      spawn(*w);
      w->spawns.push_back({{"incarnation", w->incarnation}, {"wall_us", rf::wall_us()}, {"reason", "restart"}});
    }
  }

  // The members the job keeps without `slot`: those of the last RUNNING generation this
  // launcher has not given up (another node's count while they were members), or before
  // the job first ran, this launcher's other live primaries.
  int others_running(int slot) const {
    std::set<int> kept;
    for (const auto& [s, inc] : snap_.members) kept.insert(s);
    for (const auto& w : workers_) {
      if (!snap_.seen && !w.spare && !w.done) kept.insert(w.slot);
      if (w.done) kept.erase(w.slot);
    }
    kept.erase(slot);
    return static_cast<int>(kept.size());
  }

  // Whether a worker of this node stands by for this failure: alive here and known to the
  // coordinator as a standby (registered, not a member of the last RUNNING generation) in
  // its last status. A process still starting up (not yet joined; it may never get there)
  // is no spare: counting it held the dead slot's restart until --min-world-timeout with
  // nobody to fill the hole. Each held restart has claimed one standby already. (The
  // status is at most one poll old: a worker that registered since is not counted yet,
  // and the slot restarts at once, as without spares.)
  bool spare_available(const WorkerProc& dead) const {
    if (opt_.spares == 0 || !snap_.seen || stopping_ || job_over_) return false;
    int standby = 0, held = 0;
    for (const auto& w : workers_) {
      if (&w == &dead) continue;
      if (w.held) ++held;
      else if (w.pid > 0 && standby_.count({w.slot, w.incarnation})) ++standby;
    }
    return standby > held;
  }

  // Starts the held restarts whose recovery has completed (RUNNING, a step past T), or
  // whose spare is gone, or after --min-world-timeout without either (bounded); drops
  // them when the job is over.
  void release_held(const json& st) {
    // Held restarts still waiting for their recovery, beyond the standbys left to serve
    // them: a spare counted on is gone (exited, evicted as hung) before it was placed in a
    // running generation, and nobody registered fills that hole unless the slot restarts
    // now (the spare's own restart is still starting up: no spare, see spare_available).
    const int finished_now = st.value("recoveries", 0);
    int spares_missing = 0;
    for (const auto& w : workers_) {
      if (w.held && finished_now <= w.held->finished) ++spares_missing;
      else if (!w.held && w.pid > 0 && standby_.count({w.slot, w.incarnation})) --spares_missing;
    }
    for (auto& w : workers_) {
      if (!w.held) continue;
      if (stopping_ || job_over_) {
        w.held.reset();
        w.done = true;
        note(rf::str("slot ", w.slot, ": held restart dropped, the job is ending"));
        continue;
      }
      std::string reason;
      bool next_spare = true;  // it starts after the hole was filled, as the next spare
      const double waited = rf::seconds_since(w.held->since);
      if (st.value("phase", "") == "RUNNING" && finished_now > w.held->finished) {
        if (!w.held->target) {
          json summary;
          try {
            summary = admin_->summary();
          } catch (const rf::Error& e) {
            coord_lost(e.what());
            return;
          }
          for (const auto& r : summary.value("recoveries", json::array()))
            if (r.value("finished", false)) w.held->target = r.value("target_step", int64_t{-1});
          if (!w.held->target) continue;
        }
        const int64_t step = st.value("step", int64_t{-1});
        if (step > *w.held->target)
          reason = rf::str("recovery to generation ", st.value("generation", int64_t{0}), " completed (T ",
                           *w.held->target, ", step ", step, " done)");
      } else if (spares_missing > 0 && finished_now <= w.held->finished) {
        --spares_missing;
        next_spare = false;
        reason = "the spare it waited for is gone before the recovery completed";
      } else if (waited >= std::chrono::duration<double>(opt_.timing.min_world_timeout).count()) {
        reason = rf::str("no completed recovery within --min-world-timeout");
      }
      if (reason.empty()) continue;
      w.held.reset();
      spawn(w);
      w.spawns.push_back({{"incarnation", w.incarnation}, {"wall_us", rf::wall_us()}, {"reason", reason},
                          {"held_ms", waited * 1000.0}});
      note(rf::str("slot ", w.slot, " restarted (incarnation ", w.incarnation, ")",
                   next_spare ? " as the next spare" : "", " after ", static_cast<long long>(waited * 1000.0),
                   " ms: ", reason));
    }
  }

  void coord_lost(const std::string& why) {
    if (!error_.empty()) return;
    // With replicas, no leader answering may mean the job ended while this launcher was
    // following a lost one: etcd holds the phase the last leader committed.
    if (!opt_.etcd.empty() && admin_ && admin_->committed_phase() == "DONE") {
      if (!job_over_) note("no coordinator leads any more; etcd's committed state says the job is DONE");
      last_status_["phase"] = "DONE";
      job_over_ = true;
      return;
    }
    error_ = "lost the coordinator: " + why;
    job_over_ = true;
    kill_all(SIGKILL);
  }

  void poll_status() {
    json st;
    try {
      st = admin_->status();
    } catch (const rf::Error& e) {
      coord_lost(e.what());
      return;
    }
    take_phase(st);
    const std::string phase = st.value("phase", "");
    if (phase == "RUNNING" && !running_since_) running_since_ = rf::Clock::now();
    // Workers evicted as hung (D2) are still alive somewhere: kill them before the
    // replacement starts, so two incarnations never run at once.
    for (const auto& e : st["evicted"]) {
      WorkerProc* w = by_slot(e.value("slot", -1));
      const int64_t inc = e.value("incarnation", int64_t{-1});
      if (w && w->pid > 0 && w->incarnation == inc && !w->killed_as_hung.count(inc)) {
        w->killed_as_hung.insert(inc);
        // Judged against what ran before the eviction: by the reap, the new generation
        // may already be planned with the spare in it.
        w->evicted_finished = snap_.finished;
        w->evicted_was_member = snap_.members.count({w->slot, inc}) > 0;
        ::kill(-w->pid, SIGKILL);
        note(rf::str("slot ", w->slot, " (incarnation ", inc, ") was evicted as hung: SIGKILL"));
      }
    }
    standby_.clear();
    for (const auto& w : st.value("standby", json::array()))
      standby_.insert({w.value("slot", -1), w.value("incarnation", int64_t{-1})});
    if (phase == "RUNNING") {
      snap_.seen = true;
      snap_.members.clear();
      for (const auto& m : st["members"]) snap_.members.insert({m.value("slot", -1), m.value("incarnation", int64_t{-1})});
      snap_.finished = st.value("recoveries", 0);
    }
    release_held(st);
    status_.update(st, total_restarts_);
  }

  void inject_due() {
    // at= counts from the moment the job first runs (generation 1 RUNNING), not from the
    // launch, so a fault lands in training whatever the start-up time was.
    if (!running_since_) return;
    const double t = rf::seconds_since(*running_since_);
    for (size_t i = 0; i < opt_.inject.size(); ++i) {
      const FaultSpec& f = opt_.inject[i];
      if (!f.launcher_side() || fired_.count(i) || t < *f.at_seconds) continue;
      fired_.insert(i);
      WorkerProc* w = by_slot(f.rank);
      if (!w || w->pid <= 0) {
        note(rf::str("inject ", f.to_string(), ": slot ", f.rank, " is not running on this node, skipped"));
        if (w) skipped_[i] = rf::str("slot ", f.rank, " was not running at ", *f.at_seconds, " s");
        continue;
      }
      const int sig = f.kind == FaultKind::Kill ? SIGKILL : SIGSTOP;
      const int64_t wall = rf::wall_us();
      ::kill(-w->pid, sig);
      injected_.push_back({{"spec", f.to_string()}, {"by", "launcher"}, {"slot", w->slot}, {"incarnation", w->incarnation},
                           {"pid", w->pid}, {"signal", sig == SIGKILL ? "SIGKILL" : "SIGSTOP"}, {"wall_us", wall}});
      note(rf::str("inject ", f.to_string(), ": ", sig == SIGKILL ? "SIGKILL" : "SIGSTOP", " to slot ", w->slot,
                   " (pid ", w->pid, ")"));
    }
  }

  void note(const std::string& s) { status_.note(s); }

  // A status's phase: the job is over when DONE, or STOPPED by the coordinator (its error).
  void take_phase(const json& st) {
    last_status_ = st;
    last_step_ = std::max(last_step_, st.value("step", int64_t{-1}));
    const std::string phase = st.value("phase", "");
    if (phase == "STOPPED" && !job_over_) {
      job_over_ = true;
      error_ = st.value("error", "the coordinator stopped the job");
      kill_all(SIGKILL);
    }
    if (phase == "DONE") job_over_ = true;
  }

  // The coordinator's phase now, after a worker's non-zero exit was reported: the job may
  // be DONE (it left first) or STOPPED (a digest mismatch in the first round, a fatal
  // error the worker reported): then nothing is restarted and the job's error is the
  // coordinator's.
  void refresh_phase() {
    try {
      take_phase(admin_->status());
    } catch (const rf::Error& e) {
      coord_lost(e.what());
    }
  }

  void loop() {
    TimePoint last_status = rf::Clock::now() - std::chrono::seconds(1);
    std::optional<TimePoint> stop_deadline;
    int handled_signals = 0;
    while (true) {
      reap();
      if (g_signals > handled_signals) {
        handled_signals = g_signals;
        if (!stopping_) {
          stopping_ = true;
          stop_deadline = rf::Clock::now() + opt_.stop_grace;
          note("stop requested: workers finish their step and leave (Ctrl-C again to kill)");
          try {
            admin_->stop();
          } catch (const rf::Error& e) {
            coord_lost(e.what());
          }
        } else {
          kill_all(SIGKILL);
        }
      }
      if (stop_deadline && rf::Clock::now() >= *stop_deadline && any_running()) {
        note("workers did not stop within --stop-grace: SIGKILL");
        kill_all(SIGKILL);
        stop_deadline.reset();
      }
      inject_due();
      if (rf::Clock::now() - last_status >= std::chrono::milliseconds(50)) {
        last_status = rf::Clock::now();
        poll_status();
      }
      bool all_done = true;
      for (auto& w : workers_) all_done &= (w.pid <= 0 && !w.held);
      if (all_done) break;
      ::poll(nullptr, 0, 5);
    }
    // Let the coordinator see the last leaves (several nodes finish at different times).
    const TimePoint deadline = rf::Clock::now() + std::chrono::seconds(3);
    while (error_.empty() && rf::Clock::now() < deadline) {
      poll_status();
      const std::string phase = last_status_.value("phase", "");
      if (phase == "DONE" || phase == "STOPPED") break;
      ::poll(nullptr, 0, 20);
    }
  }

  InjectRecord inject_record() const {
    InjectRecord r;
    for (const auto& w : workers_) r.node_slots.insert(w.slot);
    r.due = fired_;
    r.skipped = skipped_;
    if (running_since_) r.ran_for_s = rf::seconds_since(*running_since_);
    r.last_step = last_step_;
    r.done = last_status_.value("phase", "") == "DONE";
    return r;
  }

  int finish() {
    const std::string phase = last_status_.value("phase", "");
    bool all_zero = true;
    for (auto& w : workers_)
      for (auto& e : w.exits) all_zero &= e.value("status", 1) == 0 || w.exits.back() != e;
    int code = 1;
    if (phase == "DONE" && error_.empty() && late_failures_.empty()) code = 0;
    else if (stopping_ && error_.empty() && all_zero) code = 0;
    if (start_failure_) code = *start_failure_;  // the status of the worker that could not start
    if (error_.empty() && !late_failures_.empty()) {
      for (const auto& f : late_failures_) error_ += (error_.empty() ? "" : "; ") + f;
    }
    if (error_.empty() && phase != "DONE" && code != 0) error_ = rf::str("the job ended in phase ", phase);
    json summary;
    try {
      summary = admin_->summary();
    } catch (const rf::Error&) {
      summary = json::object();
    }
    const json fired = summary.value("fired", json::array());
    json workers = json::array();
    for (auto& w : workers_)
      workers.push_back({{"slot", w.slot}, {"spare", w.spare}, {"restarts", w.restarts}, {"exits", w.exits},
                         {"spawns", w.spawns}});
    const json out = job_summary({.exit_status = code, .error = error_, .coordinator = summary, .last_status = last_status_,
                                  .launcher_injected = injected_, .not_fired = not_fired(opt_.inject, inject_record(), fired),
                                  .restarts = total_restarts_, .wall_s = rf::seconds_since(start_),
                                  .start_wall_us = start_wall_us_, .last_step = last_step_, .workers = workers});
    status_.finish(out);
    if (!opt_.trace.empty()) write_job_trace(opt_, workers, start_wall_us_);
    // A fault asked for and never injected: the run did not test what it was meant to. The
    // training itself succeeded, so the exit status is unchanged; the summary lists them.
    for (const auto& nf : out["not_fired"])
      std::fprintf(stderr, "ringfence: --inject %s %s: %s\n", nf["spec"].get<std::string>().c_str(),
                   nf["certain"].get<bool>() ? "never fired" : "probably never fired",
                   nf["reason"].get<std::string>().c_str());
    if (!opt_.summary_path.empty()) {
      std::ofstream f(opt_.summary_path);
      f << out.dump(2) << "\n";
      if (!f) {
        std::fprintf(stderr, "ringfence: cannot write the summary to '%s'\n", opt_.summary_path.c_str());
        if (code == 0) code = 1;  // the result is lost
      }
    }
    return code;
  }

  RunOptions opt_;
  std::string token_, coord_addr_;
  std::string error_dir_;  // where the workers' error files go ("" : none could be made)
  std::unique_ptr<Coordinator> coord_;
  std::unique_ptr<AdminClient> admin_;
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
  json injected_ = json::array();
  json last_status_ = json::object();
  RunningSnapshot snap_;
  std::set<std::pair<int, int64_t>> standby_;  // (slot, incarnation) the last status listed as standby
  std::optional<int> start_failure_;  // exit code: a worker ended before it registered
  std::vector<std::string> late_failures_;  // non-zero exits after the job was DONE, or after leaving it
  StatusLine status_{!opt_.quiet};
};

}  // namespace

int run_supervisor(const RunOptions& options) { return Supervisor(options).run(); }

}  // namespace rf::apps
