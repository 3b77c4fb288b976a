#include "tests/ddp/inproc/inproc_job.h"

#include <algorithm>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/clock.h"
#include "base/str.h"
#include "core/optim/sgd.h"
#include "elastic/fault_spec.h"
#include "elastic/sim_control.h"
#include "tests/comm/inproc/loopback_communicator.h"
#include "tests/ddp/test_model.h"

namespace rf::ddp::inproc {

namespace {

// Thrown on a worker's thread when its process would be gone: it unwinds the trainer as a
// SIGKILL ends it, and no handler of the trainer's catches it (not an std::exception).
struct WorkerDied {};

constexpr auto kHeartbeat = std::chrono::milliseconds(100);

class Job {
 public:
  explicit Job(const JobOptions& o) : opt_(o), coord_(membership_options(o)), data_(testing::make_test_data(512, 7)) {}

  JobOutcome run() {
    const TimePoint t0 = Clock::now();
    for (int slot = 0; slot < opt_.world; ++slot) start(slot, 0);
    std::unique_lock<std::mutex> l(mu_);
    while (running_ > 0) {
      if (Clock::now() - t0 > opt_.deadline) {
        out_.timed_out = true;
        cv_.notify_all();
        out_.at_timeout = coord_.describe();
        break;
      }
      // Time passes only when nothing else can move the job on: a worker is parked (a hang or
      // a stop) and the others wait for it, or every worker waits on the coordinator's timers
      // (a round that waits its join window for a slot nobody restarts).
      std::vector<elastic::WorkerId> stuck;
      for (const auto& w : workers_)
        if (w.parked && !w.release) stuck.push_back(w.id);
      const auto quiet = stuck.empty() ? elastic::SimCoordinator::Quiet::Idle : elastic::SimCoordinator::Quiet::NoCompute;
      l.unlock();
      const bool moved = coord_.advance_if_quiet(kHeartbeat, stuck, quiet);
      const auto evicted = coord_.take_evictions();
      l.lock();
      for (const auto& w : evicted) release(w);
      restart_dead();
      if (!moved) cv_.wait_for(l, std::chrono::milliseconds(1));
    }
    l.unlock();
    if (out_.timed_out) kill_all();  // every call and transfer fails now, so every thread ends
    for (auto& w : workers_) w.thread.join();
    out_.recoveries = coord_.recoveries();
    out_.transitions = coord_.transitions();
    out_.phase = coord_.phase();
    out_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return std::move(out_);
  }

 private:
  struct Worker {
    elastic::WorkerId id;
    std::thread thread;
    std::vector<std::pair<uint64_t, int>> comms;  // (generation, rank) of every communicator it made
    bool parked = false, release = false, dead = false, restarted = false;
    uint64_t died_in_generation = 0;
  };

  static elastic::MembershipOptions membership_options(const JobOptions& o) {
    elastic::MembershipOptions m;
    m.target_world = o.world;
    m.min_world = 1;
    m.heartbeat = kHeartbeat;
    return m;
  }

  TrainerConfig config(Worker& w, std::shared_ptr<elastic::SimControl> control) {
    TrainerConfig c;
    c.model_name = "inproc-mlp";
    c.global_batch = opt_.global_batch;
    c.seed = 11;
    c.steps = opt_.steps;
    c.micro_shards = opt_.micro_shards;
    c.connect_timeout = std::chrono::milliseconds(5000);
    c.plan_timeout = std::chrono::milliseconds(10000);
    c.ready_timeout = std::chrono::milliseconds(10000);
    c.on_step = [this, control](int64_t s, double) {
      if (s == opt_.sync_step) sync();
      if (s == opt_.hold_step) hold(*control);
    };
    c.seams.control = std::move(control);
    c.seams.incarnation = w.id.incarnation;
    c.seams.faults = elastic::parse_fault_specs(join_specs());
    c.seams.communicators = [this, &w](const comm::CommOptions& co) {
      {
        std::lock_guard<std::mutex> l(mu_);
        w.comms.emplace_back(co.generation, co.rank);
      }
      return net_.connect(co);
    };
    c.seams.process_fault = [this, &w](const elastic::FaultSpec& f) { on_fault(w, f); };
    return c;
  }

  std::string join_specs() const {
    std::string s;
    for (const auto& f : opt_.faults) s += (s.empty() ? "" : ";") + f;
    return s;
  }

  void start(int slot, int64_t incarnation) {
    workers_.emplace_back();
    Worker& w = workers_.back();
    w.id = {slot, incarnation};
    ++running_;
    auto control = coord_.worker(slot, incarnation);
    w.thread = std::thread([this, &w, control] { body(w, control); });
  }

  void body(Worker& w, std::shared_ptr<elastic::SimControl> control) {
    WorkerOutcome o;
    o.slot = w.id.slot;
    o.incarnation = w.id.incarnation;
    try {
      auto model = testing::make_test_mlp(3, 16);
      optim::SGD sgd(model->named_parameters(), optim::SgdOptions{.lr = 0.05f, .momentum = 0.9f});
      Trainer trainer(*model, testing::sum_loss, data_, sgd, config(w, control));
      o.result = trainer.run();
    } catch (const WorkerDied&) {
      o.died = true;
    } catch (const std::exception& e) {
      o.error = e.what();
    }
    std::lock_guard<std::mutex> l(mu_);
    out_.workers.push_back(std::move(o));
    --running_;
    cv_.notify_all();
  }

  // JobOptions::sync_step, on a training thread: until every worker applied it.
  void sync() {
    std::unique_lock<std::mutex> l(mu_);
    ++synced_;
    cv_.notify_all();
    cv_.wait(l, [&] { return synced_ >= opt_.world || out_.timed_out; });
  }

  // JobOptions::hold_step, on a training thread: until this worker has heard that a joiner
  // waits (R5's reconfigure flag), so its next step carries the grow; or the grow happened.
  void hold(const elastic::ControlPlane& control) {
    std::unique_lock<std::mutex> l(mu_);
    while (!control.reconfigure_requested() && coord_.running_world() != opt_.world && !out_.timed_out)
      cv_.wait_for(l, std::chrono::milliseconds(1));
  }

  // On the worker's thread, where its fault fires.
  void on_fault(Worker& w, const elastic::FaultSpec& f) {
    using elastic::FaultKind;
    if (f.kind == FaultKind::Hang || f.kind == FaultKind::Stop) {
      if (f.kind == FaultKind::Stop) coord_.pause(w.id, true);
      std::unique_lock<std::mutex> l(mu_);
      w.parked = true;
      ++parked_;
      cv_.notify_all();
      cv_.wait(l, [&] { return w.release; });
    }
    die(w);
    throw WorkerDied{};
  }

  // The process is gone: its coordinator connection and every endpoint it had (D1).
  void die(Worker& w) {
    std::vector<std::pair<uint64_t, int>> comms;
    {
      std::lock_guard<std::mutex> l(mu_);
      comms = w.comms;
      w.died_in_generation = coord_.generation();
    }
    coord_.kill(w.id);
    for (const auto& [g, rank] : comms) net_.kill(g, rank);
    std::lock_guard<std::mutex> l(mu_);
    w.dead = true;
    cv_.notify_all();
  }

  void kill_all() {
    std::vector<std::pair<elastic::WorkerId, std::vector<std::pair<uint64_t, int>>>> all;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& w : workers_) {
        all.emplace_back(w.id, w.comms);
        w.release = true;
      }
    }
    cv_.notify_all();
    for (const auto& [id, comms] : all) {
      coord_.kill(id);
      for (const auto& [g, rank] : comms) net_.kill(g, rank);
    }
  }

  // Under mu_: the launcher SIGKILLs an evicted worker that is parked.
  void release(const elastic::WorkerId& id) {
    for (auto& w : workers_)
      if (w.id == id && w.parked && !w.release) {
        w.release = true;
        --parked_;
      }
    cv_.notify_all();
  }

  // Under mu_: the launcher's restarts.
  void restart_dead() {
    if (opt_.restart == Restart::Never) return;
    std::vector<elastic::WorkerId> again;
    for (auto& w : workers_) {
      if (!w.dead || w.restarted) continue;
      if (opt_.restart == Restart::AfterShrink &&
          !(coord_.phase() == elastic::Phase::Running && coord_.generation() > w.died_in_generation))
        continue;
      w.restarted = true;
      again.push_back(w.id);
    }
    for (const auto& id : again) {
      ++out_.restarts;
      start(id.slot, id.incarnation + 1);
    }
  }

  const JobOptions opt_;
  elastic::SimCoordinator coord_;
  comm::inproc::LoopbackNetwork net_;
  const data::Dataset data_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<Worker> workers_;  // stable addresses: each thread holds its own
  int running_ = 0, parked_ = 0, synced_ = 0;
  JobOutcome out_;
};

}  // namespace

std::vector<std::string> JobOutcome::final_digests() const {
  std::vector<std::string> d;
  for (const auto& w : workers)
    if (!w.died && w.error.empty() && !w.result.standby) d.push_back(w.result.digest);
  return d;
}

std::vector<std::string> JobOutcome::failures() const {
  std::vector<std::string> f;
  for (const auto& t : transitions)
    if (t.event == elastic::TransitionEvent::Fail || t.event == elastic::TransitionEvent::Evict)
      f.push_back(rf::str(t.worker.slot, ":", t.cause));
  return f;
}

std::string JobOutcome::event_log() const {
  std::ostringstream s;
  const TimePoint t0 = transitions.empty() ? TimePoint{} : transitions.front().at;
  for (const auto& t : transitions)
    s << std::chrono::duration_cast<std::chrono::milliseconds>(t.at - t0).count() << " ms " << elastic::to_string(t.event)
      << " " << t.worker.slot << "/" << t.worker.incarnation << " g" << t.generation << " s" << t.step << " " << t.cause
      << "\n";
  s << at_timeout;
  for (const auto& w : workers)
    s << "worker " << w.slot << "/" << w.incarnation << (w.died ? " died" : "") << (w.result.standby ? " standby" : "")
      << " step " << w.result.step << " world " << w.result.world << " " << w.result.digest << " " << w.error << "\n";
  return s.str();
}

std::string JobOutcome::errors() const {
  std::ostringstream s;
  for (const auto& w : workers)
    if (!w.error.empty()) s << "slot " << w.slot << "/" << w.incarnation << ": " << w.error << "\n";
  return s.str();
}

JobOutcome run_job(const JobOptions& options) { return Job(options).run(); }

}  // namespace rf::ddp::inproc
