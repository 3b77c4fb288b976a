#include "ddp/trainer.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "base/clock.h"
#include "base/enforce.h"
#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "base/thread_sched.h"
#include "comm/communicator.h"
#include "comm/bootstrap/file_store.h"
#include "comm/flight_recorder.h"
#include "comm/bootstrap/local_launcher.h"
#include "ddp/trainer_impl.h"
#include "elastic/client.h"
#include "elastic/worker_env.h"
#include "elastic/errors.h"

namespace rf::ddp {

using elastic::FaultPhase;

namespace {
CheckpointingOptions checkpointing_options(const TrainerConfig& c) {
  return {.dir = c.ckpt_dir, .every = c.ckpt_every, .keep = c.ckpt_keep, .staging_dir = c.ckpt_staging, .resume = c.resume, .model_name = c.model_name,
          .optimizer_hparams = c.ckpt_optimizer_hparams, .data_order = c.ckpt_data_order,
          .gradient_sum = ckpt::gradient_sum_name(c.micro_shards), .on_restore = c.on_restore,
          .partial_write_hook = c.ckpt_partial_write_hook};
}

// A folder of its own under TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = str(base && *base ? base : "/tmp", "/", prefix, "XXXXXX");
    if (!::mkdtemp(tmpl.data())) throw Error(str("cannot make a temporary folder ", tmpl, ": ", std::strerror(errno)));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Without fault tolerance: comm's local launcher's ranks, or one rank alone when none of its
// variables is set (its store a temporary folder, removed by the returned guard).
comm::RankEnv plain_rank_env(std::unique_ptr<TempDir>& store) {
  const bool alone = !std::getenv("RF_RANK") && !std::getenv("RF_WORLD") && !std::getenv("RF_STORE");
  if (!alone) return comm::rank_env_from_environment();
  store = std::make_unique<TempDir>("ringfence-alone-");
  return {.rank = 0, .world = 1, .store_dir = store->path()};
}

std::string trace_path(const TrainerConfig& c) {
  if (!c.trace.empty() || c.seams.control) return c.trace;
  return elastic::read_worker_env().trace;
}
}  // namespace

Trainer::Impl::Impl(nn::Module& m, LossFn l, const data::Dataset& d, optim::Optimizer& o, TrainerConfig c)
    : model(m), loss_fn(std::move(l)), ds(d), optimizer(o), cfg(std::move(c)),
      sampler(d.n, cfg.global_batch, cfg.seed), reducer(m.named_parameters(), cfg.reducer),
      exact(cfg.micro_shards > 0 ? std::make_unique<ExactReducer>(reducer, m.named_parameters(), cfg.micro_shards) : nullptr),
      state(m, o, cfg.model_name),
      watch(cfg.stall), checkpointing(checkpointing_options(cfg), m, o, state), tracer(trace_path(cfg)),
      recovery({cfg, current, state, reducer, watch, checkpointing, &tracer}) {}

CheckpointOrigin Trainer::Impl::origin() const {
  return {current.rank, current.world, current.plan.generation, current.plan.job_id};
}

// A checkpoint that could not be written is a warning; the heartbeats (and the leave) carry
// the count to the launcher.
void Trainer::Impl::report_checkpoint_failures() {
  if (recovery.control() && checkpointing.failures() > 0)
    recovery.control()->set_checkpoint_failures(checkpointing.failures(), checkpointing.last_error());
}

void Trainer::Impl::finish_result(double train_seconds) {
  result.train_seconds = train_seconds;
  result.step = state.step();
  result.digest = state.digest();
  result.generation = current.plan.generation;
  result.world = current.world;
  result.resumed_step = checkpointing.resumed_step();
  result.checkpoints = checkpointing.saves();
  result.checkpoints_failed = checkpointing.failures();
  result.ckpt_wait_seconds = checkpointing.wait_seconds();
}

// Fault tolerance off: one generation from comm's local launcher, the same step loop.
TrainerResult Trainer::Impl::run_plain() {
  std::unique_ptr<TempDir> alone_store;
  const comm::RankEnv env = plain_rank_env(alone_store);
  // One generation. Several ranks always start fresh: without a coordinator they could not
  // agree on which checkpoint to continue from. One rank may resume, and may run the
  // program's own step.
  if ((cfg.resume || !cfg.resume_from.empty()) && env.world > 1)
    throw InvalidInput(str("resume needs fault tolerance (fault_tolerance = true, under ringfence run) with ", env.world,
                           " ranks: without a coordinator they could not agree on the checkpoint"));
  if (cfg.resume && !cfg.resume_from.empty()) throw InvalidInput("resume and resume_from: give one of them");
  if (cfg.local_step && (env.world > 1 || exact)) throw InvalidInput("local_step: one rank only, not in exact mode");
  slot = env.rank;
  current.rank = env.rank;
  current.world = env.world;
  current.plan.generation = 1;
  log::set_slot(slot);
  log::set_rank(current.rank);
  log::set_generation(current.plan.generation);
  inj = std::make_unique<FaultInjector>();
  audit_ = std::make_unique<AuditLog>(cfg.audit_log, env.rank, 0);
  checkpointing.attach(audit_.get());
  comm::prepare_backend(cfg.backend);
  if (env.world == 1) checkpointing.one_rank_alone();  // the directory's lock first
  if (cfg.resume) resume_from_disk();
  if (!cfg.resume_from.empty()) checkpointing.restore_file(cfg.resume_from, current.plan.generation);
  checkpointing.refuse_foreign();
  // The plain-mode communicator: no coordinator, no recovery, the fixed D3.
  comm::FileStore store(env.store_dir);
  comm::CommOptions co;
  co.store = &store;
  co.rank = current.rank;
  co.world = current.world;
  co.generation = 1;
  co.stall_timeout = watch.fixed_comm_stall();
  co.connect_timeout = cfg.connect_timeout;
  co.flight_recorder_path = cfg.flight_recorder;
  place_comm(co, reducer.device());
  current.comm = comm::make_communicator(cfg.backend, co);
  comm::set_phase_label(kTrainingPhaseLabel);  // for the flight recorder's records
  const TimePoint t0 = Clock::now();
  train_generation();
  checkpointing.final_save(origin());
  const double train_seconds = seconds_since(t0);
  recovery.drop_comm();
  recovery.forget_previous();
  finish_result(train_seconds);
  return result;
}

// Just before an injected fault fires (FaultInjector::set_before_fire).
void Trainer::Impl::before_fault(const elastic::FaultSpec& f, int64_t s) {
  // The launcher's report of specs that never fired hears it from the coordinator. Best
  // effort: a coordinator out of reach must not stop the fault from firing.
  try {
    if (recovery.control()) recovery.control()->injected(current.plan.generation, s, f.to_string());
  } catch (const Error& e) {
    log::warn("worker", "could not tell the coordinator about ", f.to_string(), ": ", e.what());
  }
  // Last, just before the fault: bench/recovery measures recovery from this record, so the
  // call above must not be inside what it measures.
  audit_->record("inject", current.plan.generation, s, "", current.rank, current.world, {{"spec", f.to_string()}});
  // Written out now: a kill leaves the trace complete up to here.
  tracer.instant_any("inject", f.to_string(),
                     {.step = s, .generation = static_cast<int64_t>(current.plan.generation), .rank = current.rank});
  tracer.flush();
}

// Fault tolerance on: the coordinator (the environment's, or the seams'), the fault
// injector, the audit log and the transport context; this thread is the training thread.
void Trainer::Impl::start_fault_tolerant() {
  std::shared_ptr<elastic::ControlPlane> control = cfg.seams.control;
  int64_t incarnation = cfg.seams.incarnation;
  std::string token;
  if (control) {
    inj = std::make_unique<FaultInjector>(cfg.seams.faults, incarnation, control->slot());
  } else {
    const elastic::WorkerEnv env = elastic::read_worker_env();
    const elastic::ClientOptions copt = elastic::ClientOptions::from(env);
    incarnation = copt.incarnation;
    token = copt.token;
    // Under `ringfence run` stdout is the launcher's output pipe (base/output_pump.h), which
    // stdio would buffer whole: line by line, as on a terminal, so progress shows as it happens.
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
    // The launcher's run directory takes the post-mortems: never a terminal or pipe that may
    // not be read while this worker recovers.
    if (cfg.flight_recorder.empty() && !env.run_dir.empty())
      cfg.flight_recorder = str(env.run_dir, "/flight-slot", copt.slot, "-inc", copt.incarnation, ".jsonl");
    inj = std::make_unique<FaultInjector>(elastic::parse_fault_specs(env.inject), copt.incarnation, copt.slot);
    control = std::make_shared<elastic::Client>(copt);
  }
  slot = control->slot();
  log::set_slot(slot);
  inj->set_drop([this] { recovery.inject_drop(); });
  if (cfg.seams.process_fault) inj->set_process_fault(cfg.seams.process_fault);
  audit_ = std::make_unique<AuditLog>(cfg.audit_log, slot, incarnation);
  checkpointing.attach(audit_.get());
  checkpointing.set_storage_faults([this](int64_t s) { return inj->storage_fault(s); });  // --inject disk:...
  inj->set_before_fire([this](const elastic::FaultSpec& f, int64_t s) { before_fault(f, s); });
  watch.board().attach_thread(current_tid());  // this is the training thread
  control->set_activity_source([this](Duration frozen) { return watch.board().read(Clock::now(), frozen); });
  recovery.start(std::move(control), token, *inj, *audit_);  // the transport context, step 1's hooks
}

// `resume`: the newest valid checkpoint on disk, before the first report.
void Trainer::Impl::resume_from_disk() {
  if (cfg.ckpt_dir.empty()) throw InvalidInput("resume needs a checkpoint directory (ckpt_dir)");
  // The audit line marks where this run's lineage begins, also when nothing was restored.
  if (!checkpointing.restore_newest("", current.plan.generation))
    audit_->record("resume", 0, state.step(), state.current_digest(), -1, 0);
}

TrainerResult Trainer::Impl::run() {
  if (cfg.overlap_ab_period < 0)
    throw InvalidInput(str("overlap_ab_period must be >= 0 (0 = off), not ", cfg.overlap_ab_period));
  if (cfg.micro_shards < 0) throw InvalidInput(str("micro_shards must be >= 0 (0 = the float sum), not ", cfg.micro_shards));
  if (!cfg.fault_tolerance) return run_plain();
  if (!cfg.resume_from.empty() || cfg.local_step)
    throw InvalidInput("resume_from and local_step: without fault tolerance only (one rank; with it: resume)");
  start_fault_tolerant();
  if (cfg.resume) resume_from_disk();
  // The life cycle (worker_life.h): each action's outcome decides the next.
  WorkerTransition t{WorkerState::Joining, WorkerAction::Join};
  while (t.action != WorkerAction::End && t.action != WorkerAction::EndStandby)
    t = next_action(t, perform(t.action));
  result.standby = t.action == WorkerAction::EndStandby;
  recovery.forget_previous();  // no next generation to shrink into
  recovery.end_trace_phase();
  finish_result(seconds_since(joined_at));
  recovery.control()->close();
  return result;
}

WorkerEvent Trainer::Impl::perform(WorkerAction action) {
  switch (action) {
    case WorkerAction::Join: return join();
    case WorkerAction::Report: return recovery.report();  // steps 2-4
    case WorkerAction::Form: {
      const WorkerEvent formed = recovery.form();  // plan, steps 5-7
      watch.idle();  // ready() waits on the coordinator
      return formed;
    }
    case WorkerAction::Resume: return recovery.resume();  // step 8
    case WorkerAction::Train: {
      if (trained) ++result.recoveries;
      trained = true;
      const WorkerEvent ended = train_generation();
      watch.idle();
      return ended;
    }
    case WorkerAction::Leave: return leave();
    case WorkerAction::DropComm:
      recovery.drop_comm();
      // D4: a fenced worker comes back as a new member.
      return {recovery.control()->fenced() ? WorkerEventKind::Fenced : WorkerEventKind::CommDropped};
    case WorkerAction::End:
    case WorkerAction::EndStandby: break;
  }
  RF_ENFORCE(false, "no worker action to perform for ", to_string(action));
  return {WorkerEventKind::Finished};  // not reached
}

// A worker that joins after the job finished (a spare, or a restart that started up while the
// last members left) has nothing to do: it ends as a standby, not an error.
WorkerEvent Trainer::Impl::join() {
  const bool joined = recovery.join();
  if (!joined_once) {
    joined_once = true;
    joined_at = Clock::now();
    if (joined) recovery.start_staging_pretouch();
  }
  return {joined ? WorkerEventKind::Joined : WorkerEventKind::JobFinished};
}

// The final state (or the stop's) is on disk before the worker leaves.
void Trainer::Impl::final_save() {
  try {
    checkpointing.final_save(origin());
  } catch (const ckpt::CheckpointWriteFailed& e) {
    // Every restart would end the same way: stop the job with it (best effort).
    try {
      recovery.control()->fatal(e.what());
    } catch (const Error&) {
    }
    throw;
  }
  report_checkpoint_failures();  // what the final flush found, with the leave
}

WorkerEvent Trainer::Impl::leave() {
  final_save();
  inj->at(FaultPhase::Leave, state.step());
  elastic::ControlPlane& client = *recovery.control();
  try {
    client.leave();
  } catch (const elastic::Refused& e) {
    // Fenced (D4) between the last step and the leave's answer: the leader was lost (or this
    // worker's lease ran out) while it trained. The job is not over for it: it joins the next
    // generation as the others do, whose recovery finds every state at the last step and has
    // nothing left to train, and leaves there.
    if (!client.fenced()) throw;
    log::warn("worker", e.what(), "; joining the next generation to leave");
    return {WorkerEventKind::Fenced};
  }
  recovery.drop_comm();
  return {WorkerEventKind::Left};
}

bool launched_by_ringfence() { return elastic::read_worker_env().launched(); }

Trainer::Trainer(nn::Module& model, LossFn loss, const data::Dataset& dataset, optim::Optimizer& optimizer,
                 TrainerConfig config)
    : impl_(std::make_unique<Impl>(model, std::move(loss), dataset, optimizer, std::move(config))) {}

Trainer::~Trainer() = default;

TrainerResult Trainer::run() { return impl_->run(); }

const StepTimeline& Trainer::last_step_timeline() const { return impl_->reducer.timeline(); }

TrainerProgress Trainer::progress() const {
  const Impl& i = *impl_;
  TrainerProgress p;
  p.generation = i.current.plan.generation;
  p.rank = i.current.rank;
  p.world = i.current.world;
  p.step = i.state.step();
  const elastic::ControlPlane* client = i.recovery.control();
  p.stop_requested = client && client->stop_requested();
  p.reconfigure_requested = client && client->reconfigure_requested();
  p.checkpoints_failed = i.checkpointing.failures();
  return p;
}

}  // namespace rf::ddp
