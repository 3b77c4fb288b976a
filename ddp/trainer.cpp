#include "ddp/trainer.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "base/thread_sched.h"
#include "base/trace.h"
#include "comm/communicator.h"
#include "comm/errors.h"
#include "comm/file_store.h"
#include "comm/flight_recorder.h"
#include "comm/local_launcher.h"
#include "core/autograd.h"
#include "core/data/data.h"
#include "ddp/audit_log.h"
#include "elastic/errors.h"
#include "ddp/checkpointing.h"
#include "ddp/fault_injector.h"
#include "ddp/recovery.h"
#include "ddp/step_watch.h"
#include "ddp/train_state.h"
#include "elastic/client.h"

namespace rf::ddp {

using elastic::FaultPhase;

namespace {
// Why the training loop handed control back to recovery.
enum class Leave { Recover, Finished, Stopped };

CheckpointingOptions checkpointing_options(const TrainerConfig& c) {
  return {.dir = c.ckpt_dir, .every = c.ckpt_every, .keep = c.ckpt_keep, .resume = c.resume, .model_name = c.model_name,
          .optimizer_hparams = c.ckpt_optimizer_hparams, .data_order = c.ckpt_data_order};
}

std::string trace_path(const TrainerConfig& c) {
  if (!c.trace.empty()) return c.trace;
  const char* env = std::getenv("RINGFENCE_TRACE");
  return env ? env : "";
}
}  // namespace

// The step loop (R1, R2, R5) and the order of a worker's life: join, then recovery's steps
// (ddp/recovery.h) and a generation of training, until the last step, a stop or an error.
struct Trainer::Impl {
  nn::Module& model;
  LossFn loss_fn;
  const data::Dataset& ds;
  optim::Optimizer& optimizer;
  TrainerConfig cfg;
  data::Sampler sampler;
  Reducer reducer;
  TrainState state;
  std::unique_ptr<FaultInjector> inj;
  std::unique_ptr<AuditLog> audit_;
  std::vector<int32_t> y_buf;
  TrainerResult result;
  int slot = 0;
  // D3: the bounds learned from this worker's step times and what the training thread does
  // (read by the heartbeat thread for the coordinator's judgement, elastic/liveness.h).
  StepWatch watch;
  Checkpointing checkpointing;
  CurrentGeneration current;
  // Before recovery, which records into it from the heartbeat thread too.
  Tracer tracer;
  // Last: destroyed first, it stops the heartbeat thread that calls back into it (step 1)
  // before any member it uses goes, also when run() ended with an exception.
  Recovery recovery;

  Impl(nn::Module& m, LossFn l, const data::Dataset& d, optim::Optimizer& o, TrainerConfig c)
      : model(m), loss_fn(std::move(l)), ds(d), optimizer(o), cfg(std::move(c)),
        sampler(d.n, cfg.global_batch, cfg.seed), reducer(m.named_parameters(), cfg.reducer), state(m, o, cfg.model_name),
        watch(cfg.stall), checkpointing(checkpointing_options(cfg), m, o, state), tracer(trace_path(cfg)),
        recovery({cfg, current, state, reducer, watch, checkpointing, &tracer}) {}

  CheckpointOrigin origin() const {
    return {current.rank, current.world, current.plan.generation, current.plan.job_id};
  }

  // A checkpoint that could not be written is a warning; the heartbeats (and the leave)
  // carry the count to the launcher.
  void report_checkpoint_failures() {
    if (recovery.client() && checkpointing.failures() > 0)
      recovery.client()->set_checkpoint_failures(checkpointing.failures(), checkpointing.last_error());
  }

  // The step's bucket all-reduces, one lane each (they overlap backward and each other).
  void trace_buckets(const TraceArgs& ta) {
    for (int b = 0; b < reducer.num_buckets(); ++b) {
      const auto [begin, end] = reducer.bucket_times(b);
      TraceArgs a = ta;
      a.bucket = b;
      tracer.span("allreduce", Tracer::kComm + b, begin, end, a);
    }
  }

  Leave train_generation() {
    comm::Communicator& comm = *current.comm;
    elastic::Client* const client = recovery.client();
    const int rank = current.rank, world = current.world;
    TimePoint window_t = Clock::now();
    int64_t window_samples = 0;
    TimePoint rate_t = Clock::now();
    int64_t rate_samples = 0;
    double rate = -1.0;  // samples/s for the live line; < 0 until the first measurement
    while (state.step() + 1 < cfg.steps) {
      if (recovery.generation_over()) return Leave::Recover;
      const int64_t s = state.step() + 1;  // R2: contribute to s only after applying s-1
      const TimePoint step_began = Clock::now();
      const Duration comm_stall = watch.begin_step(s);
      // Without fault tolerance a stall is fatal: it keeps the fixed ceiling.
      if (client) comm.set_stall_timeout(comm_stall);
      const auto idx = sampler.local_batch(s, rank, world);
      const int64_t b = static_cast<int64_t>(idx.size());
      // The batch goes straight into a tensor from the caching allocator (same size every
      // step: no page faults), then to the model's device (from its caching allocator: no
      // allocation after the first step; the copy is ordered on the device's stream).
      Tensor x;
      y_buf.resize(static_cast<size_t>(b));
      if (b) {
        x = Tensor::empty({b, ds.c, ds.h, ds.w});
        data::gather_batch(ds, idx, x.data(), y_buf.data());
        x = x.to(reducer.device());
      }
      ControlBlock cb;
      cb.samples = b;
      cb.reconfigure = client && client->reconfigure_requested() ? 1 : 0;
      cb.stop = client && client->stop_requested() ? 1 : 0;

      ControlBlock sums;
      const TraceArgs ta{.step = s, .generation = static_cast<int64_t>(current.plan.generation), .rank = rank};
      TimePoint t_fwd = Clock::now(), t_bwd = t_fwd, t_wait = t_fwd;
      try {
        inj->at(FaultPhase::Forward, s);
        if (cfg.overlap_ab_period > 0) reducer.set_overlap(overlap_ab_on(s, cfg.overlap_ab_period));
        reducer.begin_step(comm, static_cast<uint64_t>(s), cb);
        if (b > 0) {
          Tensor loss = loss_fn(model(x), y_buf);
          reducer.set_local_loss(loss);  // stays on the device: the host reads it in finish()
          t_bwd = Clock::now();
          tracer.span("forward", Tracer::kTrain, t_fwd, t_bwd, ta);
          inj->at(FaultPhase::Backward, s);
          loss.backward();
        } else {
          inj->at(FaultPhase::Backward, s);
        }
        t_wait = Clock::now();
        tracer.span("backward", Tracer::kTrain, t_bwd, t_wait, ta);
        inj->at(FaultPhase::Allreduce, s);
        ActivityBoard::WaitScope waiting(watch.board());
        sums = reducer.finish();
      } catch (const comm::CommError& e) {
        tracer.span("failed step", Tracer::kTrain, step_began, Clock::now(), ta);
        // R1: the gradient of s is incomplete; nothing is applied.
        std::fprintf(stderr, "ringfence worker slot %d rank %d: step %lld not applied: %s\n", slot, rank,
                     static_cast<long long>(s), e.what());
        reducer.abandon();
        if (!client) throw;  // fault tolerance off: nothing to recover with
        recovery.failure(e);
        return Leave::Recover;
      }
      const TimePoint t_opt = Clock::now();
      tracer.span("allreduce wait", Tracer::kTrain, t_wait, t_opt, ta);
      trace_buckets(ta);
      inj->at(FaultPhase::Optimizer, s);
      {
        NoGradGuard ng;
        optimizer.step();  // the only writer of parameters (R1)
      }
      const TimePoint t_end = Clock::now();
      tracer.span("optimizer", Tracer::kTrain, t_opt, t_end, ta);
      tracer.span("step", Tracer::kTrain, step_began, t_end, ta);
      state.set_step(s);
      const Duration step_time = t_end - step_began;
      watch.end_step(step_time);
      inj->step_took(s, step_time);  // a slow spec's reference
      if (client) client->set_step(s);
      // The launcher's live line: the global loss, and the throughput over about a second.
      rate_samples += sums.samples;
      if (const double dt = seconds_since(rate_t); dt >= 1.0 || rate < 0) {
        if (dt > 0) rate = static_cast<double>(rate_samples) / dt;
        rate_t = Clock::now();
        rate_samples = 0;
      }
      if (client) client->set_progress(reducer.global_loss(), rate);
      result.final_loss = reducer.global_loss();
      if (audit_->enabled())
        audit_->record("apply", current.plan.generation, s, state.current_digest(), rank, world,
                       {{"loss", reducer.global_loss()}});
      if (cfg.on_step) {
        cfg.on_step(s, reducer.global_loss());
        state.state_changed();  // user code may have written S (a test corrupts a replica)
      }
      window_samples += sums.samples;
      if (cfg.log_interval > 0 && rank == 0 && ((s + 1) % cfg.log_interval == 0 || s + 1 == cfg.steps)) {
        const double dt = seconds_since(window_t);
        std::fprintf(stderr, "step %lld/%lld  g %llu  W %d  loss %.4f  %.0f samples/s\n",
                     static_cast<long long>(s + 1), static_cast<long long>(cfg.steps),
                     static_cast<unsigned long long>(current.plan.generation), world, reducer.global_loss(),
                     dt > 0 ? window_samples / dt : 0.0);
        window_t = Clock::now();
        window_samples = 0;
      }
      if (cfg.verify_every > 0 && (s + 1) % cfg.verify_every == 0) {
        try {
          recovery.verify(static_cast<uint64_t>(s), "verify-every");
        } catch (const comm::CommError& e) {
          if (!client) throw;
          recovery.failure(e);
          return Leave::Recover;
        } catch (const DivergenceError& e) {
          // Never continue, and never let a restart paper over it: revoke g so that every
          // rank reports its (s, digest); the coordinator's plan finds the holders of T
          // disagreeing and stops the whole job naming them (docs/protocol.md step 4).
          std::fprintf(stderr, "ringfence worker slot %d: %s\n", slot, e.what());
          if (!client) throw;
          if (!recovery.generation_over()) client->failure_report(current.plan.generation, s, std::nullopt, e.what());
          return Leave::Recover;
        }
      }
      checkpointing.after_step(origin(), sums.checkpoint > 0 || sums.stop > 0);
      report_checkpoint_failures();
      if (sums.stop > 0) return Leave::Stopped;          // R5: everyone stops after s
      if (sums.reconfigure > 0) return Leave::Recover;   // R5: everyone leaves g after s
    }
    return Leave::Finished;
  }

  void finish_result(double train_seconds) {
    result.train_seconds = train_seconds;
    result.step = state.step();
    result.digest = state.digest();
    result.generation = current.plan.generation;
    result.world = current.world;
    result.resumed_step = checkpointing.resumed_step();
  }

  // Fault tolerance off: one generation from comm's local launcher, the same step loop.
  TrainerResult run_plain() {
    // One generation, always a fresh start: without a coordinator the ranks could not agree
    // on which checkpoint to continue from.
    if (cfg.resume) throw InvalidInput("resume needs fault tolerance (fault_tolerance = true, under ringfence run)");
    const comm::RankEnv env = comm::rank_env_from_environment();
    slot = env.rank;
    current.rank = env.rank;
    current.world = env.world;
    current.plan.generation = 1;
    inj = std::make_unique<FaultInjector>();
    audit_ = std::make_unique<AuditLog>(cfg.audit_log, env.rank, 0);
    checkpointing.attach(slot, audit_.get());
    comm::prepare_backend(cfg.backend);
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

  TrainerResult run() {
    if (cfg.overlap_ab_period < 0)
      throw InvalidInput(str("overlap_ab_period must be >= 0 (0 = off), not ", cfg.overlap_ab_period));
    if (!cfg.fault_tolerance) return run_plain();
    const elastic::ClientOptions copt = elastic::ClientOptions::from_env();
    slot = copt.slot;
    inj = FaultInjector::from_env(copt.incarnation, copt.slot);
    inj->set_drop([this] { recovery.inject_drop(); });
    audit_ = std::make_unique<AuditLog>(cfg.audit_log, copt.slot, copt.incarnation);
    checkpointing.attach(slot, audit_.get());
    checkpointing.set_storage_faults([this](int64_t s) { return inj->storage_fault(s); });  // --inject disk:...
    inj->set_before_fire([this](const elastic::FaultSpec& f, int64_t s) {
      // The launcher's report of specs that never fired hears it from the coordinator. Best
      // effort: a coordinator out of reach must not stop the fault from firing.
      try {
        if (recovery.client()) recovery.client()->injected(current.plan.generation, s, f.to_string());
      } catch (const Error& e) {
        std::fprintf(stderr, "ringfence worker slot %d: could not tell the coordinator about %s: %s\n", slot,
                     f.to_string().c_str(), e.what());
      }
      // Last, just before the fault: bench/recovery measures recovery from this record, so
      // the call above must not be inside what it measures.
      audit_->record("inject", current.plan.generation, s, "", current.rank, current.world,
                     {{"spec", f.to_string()}});
      // Written out now: a kill leaves the trace complete up to here.
      tracer.instant_any("inject", f.to_string(),
                         {.step = s, .generation = static_cast<int64_t>(current.plan.generation), .rank = current.rank});
      tracer.flush();
    });
    recovery.start(copt, *inj, *audit_);  // the transport context, the client, step 1's hooks
    elastic::Client& client = *recovery.client();
    watch.board().attach_thread(current_tid());  // this is the training thread
    client.set_activity_source([this] { return watch.board().read(Clock::now()); });
    if (cfg.resume) {
      if (cfg.ckpt_dir.empty()) throw InvalidInput("resume needs a checkpoint directory (ckpt_dir)");
      // (the audit line marks where this run's lineage begins, also when nothing was restored)
      if (!checkpointing.restore_newest("", current.plan.generation))
        audit_->record("resume", 0, state.step(), state.current_digest(), -1, 0);
    }
    // A worker that joins after the job finished (a spare, or a restart that started up
    // while the last members left) has nothing to do: it ends as a standby, not an error.
    const bool joined = recovery.join();
    if (!joined) result.standby = true;
    if (joined) recovery.start_staging_pretouch();
    const TimePoint t0 = Clock::now();
    bool first = true;
    while (joined) {
      if (client.fenced() && !recovery.join()) {  // D4: come back as a new member
        result.standby = true;
        break;
      }
      const Recovery::Round round = recovery.report();  // steps 2-4
      if (round == Recovery::Round::Finished) {
        result.standby = true;
        break;
      }
      if (round == Recovery::Round::Again) continue;
      const bool formed = recovery.form();  // plan, steps 5-7
      watch.idle();  // ready() waits on the coordinator
      if (!formed) {
        recovery.drop_comm();
        continue;
      }
      const Recovery::Resumed resumed = recovery.resume();  // step 8
      if (resumed == Recovery::Resumed::Done) break;
      if (resumed == Recovery::Resumed::Again) {
        recovery.drop_comm();
        continue;
      }
      if (!first) ++result.recoveries;
      first = false;
      const Leave why = train_generation();
      watch.idle();
      if (why == Leave::Recover) {
        recovery.drop_comm();
        continue;
      }
      try {
        checkpointing.final_save(origin());  // the final state (or the stop's) is on disk before we leave
      } catch (const ckpt::CheckpointWriteFailed& e) {
        // Every restart would end the same way: stop the job with it (best effort).
        try {
          client.fatal(e.what());
        } catch (const Error&) {
        }
        throw;
      }
      report_checkpoint_failures();  // what the final flush found, with the leave
      inj->at(FaultPhase::Leave, state.step());
      try {
        client.leave();
      } catch (const elastic::Refused& e) {
        // Fenced (D4) between the last step and the leave's answer: the leader was lost (or
        // this worker's lease ran out) while it trained. The job is not over for it: it
        // joins the next generation as the others do, whose recovery finds every state at
        // the last step and has nothing left to train, and leaves there.
        if (!client.fenced()) throw;
        std::fprintf(stderr, "ringfence worker slot %d: %s; joining the next generation to leave\n", slot, e.what());
        recovery.drop_comm();
        continue;
      }
      recovery.drop_comm();
      break;
    }
    recovery.forget_previous();  // no next generation to shrink into
    recovery.end_trace_phase();
    finish_result(seconds_since(t0));
    client.close();
    return result;
  }
};

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
  const elastic::Client* client = i.recovery.client();
  p.stop_requested = client && client->stop_requested();
  p.reconfigure_requested = client && client->reconfigure_requested();
  return p;
}

}  // namespace rf::ddp
