#include "apps/ringfence/supervisor.h"

#include <signal.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "apps/ringfence/control_plane.h"
#include "apps/ringfence/job_summary.h"
#include "apps/ringfence/job_supervisor.h"
#include "apps/ringfence/trace_merge.h"
#include "elastic/worker_env.h"
#include "base/log.h"
#include "base/str.h"

extern char** environ;

namespace rf::apps {

using nlohmann::json;
using namespace rf::elastic;

namespace {

volatile sig_atomic_t g_signals = 0;
void on_signal(int) { g_signals = g_signals + 1; }

}  // namespace

Supervisor::~Supervisor() {
  std::error_code ec;
  if (!error_dir_.empty()) std::filesystem::remove_all(error_dir_, ec);
}

int Supervisor::run() {
  if (!opt_.trace.empty()) prepare_trace_parts(opt_.trace);
  ControlPlane cp = connect_control_plane(opt_, coordinator_event_log(opt_));
  coord_ = std::move(cp.embedded);
  admin_ = std::move(cp.admin);
  token_ = cp.token;
  coord_addr_ = cp.coord_addr;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // The workers' error files (elastic/error_file.h), removed with the supervisor.
  char error_dir[] = "/tmp/ringfence-errors-XXXXXX";
  if (::mkdtemp(error_dir)) error_dir_ = error_dir;  // without it, exits are judged by status alone
  run_dir_ = make_run_dir(opt_.run_dir, opt_.event_log);
  start_workers();
  loop();
  const int code = finish();
  serve_other_launchers();
  return code;
}

// A job on several nodes under Slurm has its coordinator in the first node's launcher: the
// other nodes' launchers still ask it for the job's outcome and summary after this one's
// workers are done. It serves them until they have disconnected, for a bounded time.
void Supervisor::serve_other_launchers() {
  if (!coord_) return;
  admin_.reset();  // our own launcher connection
  const TimePoint deadline = rf::Clock::now() + kServeOthersBound;
  while (coord_->launcher_connections() > 0 && rf::Clock::now() < deadline) ::poll(nullptr, 0, 20);
  if (coord_->launcher_connections() > 0)
    note(rf::str(coord_->launcher_connections(), " other launcher(s) still connected after ",
                 std::chrono::duration_cast<std::chrono::seconds>(kServeOthersBound).count(),
                 " s: their coordinator stops now"));
}

// Slots: this node's primaries, then its spares after every node's primaries.
void Supervisor::start_workers() {
  const int world = opt_.nprocs * opt_.nnodes;
  for (int i = 0; i < (opt_.spare_node ? 0 : opt_.nprocs); ++i) {
    WorkerProc w;
    w.slot = opt_.node_rank * opt_.nprocs + i;
    w.local_rank = i;
    workers_.push_back(w);
  }
  for (int i = 0; i < opt_.spares; ++i) {
    WorkerProc w;
    w.slot = (opt_.first_spare_slot >= 0 ? opt_.first_spare_slot : world + opt_.node_rank * opt_.spares) + i;
    w.local_rank = static_cast<int>(workers_.size());
    w.spare = true;
    workers_.push_back(w);
  }
  start_ = rf::Clock::now();
  start_wall_us_ = rf::wall_us();
  for (auto& w : workers_) {
    spawn(w);
    w.spawns.push_back({{"incarnation", w.incarnation}, {"wall_us", rf::wall_us()}, {"reason", "start"}});
  }
}

void Supervisor::spawn(WorkerProc& w) {
  std::vector<std::string> env = worker_environment(
      {.coord = coord_addr_, .etcd = opt_.etcd, .job = opt_.job, .token = token_, .slot = w.slot, .incarnation = w.incarnation,
       .world = opt_.nprocs * opt_.nnodes, .node_rank = opt_.node_rank, .spare = w.spare,
       .local_rank = w.local_rank, .local_world = static_cast<int>(workers_.size()), .job_ran = snap_.seen,
       .inject = join_fault_specs(opt_.inject),
       .trace = opt_.trace.empty() ? "" : trace_part_path(opt_.trace, w.slot, w.incarnation),
       .error_file = error_file(w), .run_dir = run_dir_.path},
      environ);
  // Under Slurm a step's SIGTERM (scancel --signal, --signal=TERM@T, preemption) reaches
  // every process of the step, the workers too: they ignore it, and the launcher, which
  // gets the same signal, stops them all at one step (R5).
  w.pid = spawn_process(opt_.program, std::move(env), opt_.under_slurm);
}

std::string Supervisor::error_file(const WorkerProc& w) const {
  return error_dir_.empty() ? "" : rf::str(error_dir_, "/error-", w.slot, "-", w.incarnation);
}

WorkerProc* Supervisor::by_pid(pid_t pid) {
  for (auto& w : workers_)
    if (w.pid == pid) return &w;
  return nullptr;
}

WorkerProc* Supervisor::by_slot(int slot) {
  for (auto& w : workers_)
    if (w.slot == slot) return &w;
  return nullptr;
}

bool Supervisor::any_running() const {
  for (auto& w : workers_)
    if (w.pid > 0) return true;
  return false;
}

void Supervisor::kill_all(int sig) {
  for (auto& w : workers_)
    if (w.pid > 0) ::kill(-w.pid, sig);
}

// The first SIGINT/SIGTERM asks for a graceful stop (bounded by --stop-grace); the next one kills.
void Supervisor::handle_signals(int& handled, std::optional<TimePoint>& stop_deadline) {
  if (g_signals <= handled) return;
  handled = g_signals;
  if (stopping_) {
    kill_all(SIGKILL);
    return;
  }
  stopping_ = true;
  stop_deadline = rf::Clock::now() + opt_.stop_grace;
  note("stop requested: workers finish their step and leave (Ctrl-C again to kill)");
  try {
    admin_->stop();
  } catch (const rf::Error& e) {
    coord_lost(e.what());
  }
}

void Supervisor::loop() {
  TimePoint last_status = rf::Clock::now() - std::chrono::seconds(1);
  std::optional<TimePoint> stop_deadline;
  int handled_signals = 0;
  while (true) {
    reap();
    handle_signals(handled_signals, stop_deadline);
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
  await_last_leaves();
}

// Lets the coordinator see the last leaves (several nodes finish at different times).
void Supervisor::await_last_leaves() {
  const TimePoint deadline = rf::Clock::now() + std::chrono::seconds(3);
  while (error_.empty() && rf::Clock::now() < deadline) {
    poll_status();
    if (phase_is(Phase::Done) || phase_is(Phase::Stopped)) break;
    ::poll(nullptr, 0, 20);
  }
}

// The job's exit status, and its error when it has one.
int Supervisor::exit_code() {
  bool all_zero = true;
  for (auto& w : workers_)
    for (auto& e : w.exits) all_zero &= e.value("status", 1) == 0 || w.exits.back() != e;
  int code = 1;
  if (phase_is(Phase::Done) && error_.empty() && late_failures_.empty()) code = 0;
  else if (stopping_ && error_.empty() && all_zero) code = 0;
  if (start_failure_) code = *start_failure_;  // the status of the worker that could not start
  if (error_.empty() && !late_failures_.empty()) {
    for (const auto& f : late_failures_) error_ += (error_.empty() ? "" : "; ") + f;
  }
  if (error_.empty() && !phase_is(Phase::Done) && code != 0)
    error_ = rf::str("the job ended in phase ", last_status_.phase ? to_string(*last_status_.phase) : "");
  return code;
}

int Supervisor::finish() {
  int code = exit_code();
  SummaryReply summary;
  try {
    summary = admin_->summary();
  } catch (const rf::Error&) {
    summary = SummaryReply{};
  }
  const int flight_records = finish_run_dir(run_dir_);
  json workers = json::array();
  for (auto& w : workers_)
    workers.push_back({{"slot", w.slot}, {"spare", w.spare}, {"restarts", w.restarts}, {"exits", w.exits},
                       {"spawns", w.spawns}});
  const json out = job_summary({.exit_status = code, .error = error_, .coordinator = summary.raw,
                                .last_status = last_status_.raw, .launcher_injected = injected_,
                                .not_fired = not_fired(opt_.inject, inject_record(), summary.fired),
                                .restarts = total_restarts_, .wall_s = rf::seconds_since(start_),
                                .start_wall_us = start_wall_us_, .last_step = last_step_, .workers = workers,
                                .run_dir = flight_records > 0 ? run_dir_.path : ""});
  status_.finish(out);
  if (!opt_.trace.empty()) write_job_trace(opt_, workers, start_wall_us_);
  // A fault asked for and never injected: the run did not test what it was meant to. The
  // training itself succeeded, so the exit status is unchanged; the summary lists them.
  // (End-of-job report lines, in a form tests and scripts read.)
  for (const auto& nf : out["not_fired"])
    std::fprintf(stderr, "ringfence: --inject %s %s: %s\n", nf["spec"].get<std::string>().c_str(),
                 nf["certain"].get<bool>() ? "never fired" : "probably never fired",
                 nf["reason"].get<std::string>().c_str());
  if (flight_records > 0)
    std::fprintf(stderr, "ringfence: flight records of the failed generations: %s (%d file(s))\n", run_dir_.path.c_str(),
                 flight_records);
  write_summary(out, code);
  return code;
}

void Supervisor::write_summary(const json& out, int& code) {
  if (opt_.summary_path.empty()) return;
  std::ofstream f(opt_.summary_path);
  f << out.dump(2) << "\n";
  if (!f) {
    rf::log::error("run", "cannot write the summary to '", opt_.summary_path, "'");
    if (code == 0) code = 1;  // the result is lost
  }
}

int run_supervisor(const RunOptions& options) { return Supervisor(options).run(); }

}  // namespace rf::apps
