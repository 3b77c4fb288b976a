// A generation of training: the step loop (R1, R2, R5), one step in named parts.
#include <cstdio>
#include <optional>

#include "base/log.h"
#include "base/str.h"
#include "comm/errors.h"
#include "core/autograd.h"
#include "ddp/trainer_impl.h"
#include "elastic/control_plane.h"

namespace rf::ddp {

using elastic::FaultPhase;

namespace {
// printf's %.<digits>f, for the log line.
std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
}  // namespace

double StepRates::add(int64_t samples) {
  live_samples += samples;
  log_samples += samples;
  if (const double dt = seconds_since(live_since); dt >= 1.0 || live < 0) {
    if (dt > 0) live = static_cast<double>(live_samples) / dt;
    live_since = Clock::now();
    live_samples = 0;
  }
  return live;
}

double StepRates::take_log_rate() {
  const double dt = seconds_since(log_since);
  const double rate = dt > 0 ? static_cast<double>(log_samples) / dt : 0.0;
  log_since = Clock::now();
  log_samples = 0;
  return rate;
}

WorkerEvent Trainer::Impl::train_generation() {
  if (exact) check_micro_shards();
  StepRates rates;
  while (state.step() + 1 < cfg.steps) {
    if (recovery.generation_over()) return {WorkerEventKind::Revoked};
    if (!recovery.control() && cfg.stop_requested && cfg.stop_requested->load()) return {WorkerEventKind::StopRequested};
    // R2: contribute to s only after applying s-1.
    const int64_t s = state.step() + 1;
    if (const auto ended = cfg.local_step ? local_train_step(s, rates) : train_step(s, rates)) return *ended;
  }
  return {WorkerEventKind::Finished};
}

std::optional<WorkerEvent> Trainer::Impl::train_step(int64_t s, StepRates& rates) {
  StepTimes t;
  t.began = Clock::now();
  const Duration comm_stall = watch.begin_step(s);
  // Without fault tolerance a stall is fatal: it keeps the fixed ceiling.
  if (recovery.control()) current.comm->set_stall_timeout(comm_stall);
  const TraceArgs ta{.step = s, .generation = static_cast<int64_t>(current.plan.generation), .rank = current.rank};
  ControlBlock sums;
  try {
    if (exact) {
      const std::vector<Batch> shards = load_shards(s);
      int64_t samples = 0;
      for (const Batch& b : shards) samples += b.size;
      shards_forward_backward(s, shards, control_block(samples), ta, t);
    } else {
      const Batch batch = load_batch(s);
      forward_backward(s, batch, control_block(batch.size), ta, t);
    }
    sums = reduce(s);
  } catch (const comm::CommError& e) {
    tracer.span("failed step", Tracer::kTrain, t.began, Clock::now(), ta);
    // R1: the gradient of s is incomplete; nothing is applied.
    log::warn("worker", "step ", s, " not applied: ", e.what());
    reducer.abandon();
    if (exact) exact->abandon();
    if (!recovery.control()) throw;  // fault tolerance off: nothing to recover with
    recovery.failure(e);
    return WorkerEvent{WorkerEventKind::StepFailed, StepFailure::Transport};
  } catch (const NonFiniteGradient& e) {
    // Every rank throws it at the same step: a restart would meet it again. Stop the job.
    report_fatal(e.what());
    throw;
  }
  apply(s, ta, t);
  return after_apply(s, sums, rates);
}

// The batch goes straight into a tensor from the caching allocator (same size every step: no
// page faults), then to the model's device (from its caching allocator: no allocation after
// the first step; the copy is ordered on the device's stream).
Batch Trainer::Impl::load_batch(int64_t s) {
  const auto idx = sampler.local_batch(s, current.rank, current.world);
  Batch batch;
  batch.size = static_cast<int64_t>(idx.size());
  y_buf.resize(static_cast<size_t>(batch.size));
  if (batch.size) {
    batch.x = Tensor::empty({batch.size, ds.c, ds.h, ds.w});
    data::gather_batch(ds, idx, batch.x.data(), y_buf.data());
    batch.x = batch.x.to(reducer.device());
  }
  return batch;
}

std::vector<Batch> Trainer::Impl::load_shards(int64_t s) {
  const std::vector<int64_t> all = sampler.global_batch(s);
  const int m = exact->micro_shards();
  std::vector<Batch> shards;
  const auto [first, last] = data::Sampler::partition(m, current.rank, current.world);
  if (first == last) return shards;  // W > M: no shard for this rank
  const auto n = static_cast<int64_t>(all.size());
  const int64_t lo = data::Sampler::partition(n, static_cast<int>(first), m).first;
  y_buf.resize(static_cast<size_t>(n));
  for (auto j = first; j < last; ++j) {
    const auto [b, e] = data::Sampler::partition(n, static_cast<int>(j), m);
    Batch shard;
    shard.size = e - b;
    shard.label_offset = b - lo;
    if (shard.size) {
      shard.x = Tensor::empty({shard.size, ds.c, ds.h, ds.w});
      data::gather_batch(ds, std::span<const int64_t>(all).subspan(static_cast<size_t>(b), static_cast<size_t>(shard.size)),
                         shard.x.data(), y_buf.data() + shard.label_offset);
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

void Trainer::Impl::check_micro_shards() {
  const int m = exact->micro_shards();
  if (current.world <= m) return;
  if (current.plan.fresh_start && state.step() < 0) {  // the job's start
    const InvalidInput e(str("--exact: ", current.world, " ranks for ", m, " micro-shards: a rank would have none; "
                             "use at most ", m, " ranks or raise --micro-shards"));
    report_fatal(e.what());
    throw e;
  }
  if (!warned_idle_ranks)
    log::warn("worker", "exact mode: W ", current.world, " > ", m, " micro-shards: ", current.world - m,
              " rank(s) have no shard and only join the sums");
  warned_idle_ranks = true;
}

// Every rank meets it alike, and so would every restart: the coordinator stops the job with
// it (best effort; without fault tolerance the error alone ends the run).
void Trainer::Impl::report_fatal(const std::string& what) {
  log::error("worker", what);
  if (elastic::ControlPlane* client = recovery.control()) {
    try {
      client->fatal(what);
    } catch (const Error&) {
    }
  }
}

// This rank's samples and the R5 flags it heard from the coordinator.
ControlBlock Trainer::Impl::control_block(int64_t samples) const {
  const elastic::ControlPlane* client = recovery.control();
  ControlBlock cb;
  cb.samples = samples;
  cb.reconfigure = client && client->reconfigure_requested() ? 1 : 0;
  cb.stop = client && client->stop_requested() ? 1 : 0;
  return cb;
}

void Trainer::Impl::forward_backward(int64_t s, const Batch& batch, const ControlBlock& cb, const TraceArgs& ta,
                                     StepTimes& t) {
  t.forward = t.backward = Clock::now();
  inj->at(FaultPhase::Forward, s);
  if (cfg.overlap_ab_period > 0) reducer.set_overlap(overlap_ab_on(s, cfg.overlap_ab_period));
  reducer.begin_step(*current.comm, static_cast<uint64_t>(s), cb);
  if (batch.size > 0) {
    Tensor loss = loss_fn(model(batch.x), y_buf);
    reducer.set_local_loss(loss);  // stays on the device: the host reads it in finish()
    t.backward = Clock::now();
    tracer.span("forward", Tracer::kTrain, t.forward, t.backward, ta);
    inj->at(FaultPhase::Backward, s);
    loss.backward();
  } else {
    inj->at(FaultPhase::Backward, s);
  }
  t.wait = Clock::now();
  tracer.span("backward", Tracer::kTrain, t.backward, t.wait, ta);
}

void Trainer::Impl::shards_forward_backward(int64_t s, const std::vector<Batch>& shards, const ControlBlock& cb,
                                            const TraceArgs& ta, StepTimes& t) {
  t.forward = Clock::now();
  inj->at(FaultPhase::Forward, s);
  exact->begin_step(*current.comm, static_cast<uint64_t>(s), cb, static_cast<int>(shards.size()));
  bool backward_reached = false;
  for (const Batch& shard : shards) {
    exact->begin_shard();
    if (shard.size == 0) {
      exact->end_empty_shard();
      continue;
    }
    const std::span<const int32_t> labels(y_buf.data() + shard.label_offset, static_cast<size_t>(shard.size));
    Tensor loss = loss_fn(model(shard.x), labels);
    if (!backward_reached) {
      backward_reached = true;
      t.backward = Clock::now();
      inj->at(FaultPhase::Backward, s);
    }
    loss.backward();
    exact->end_shard(loss);
  }
  if (!backward_reached) {
    t.backward = Clock::now();
    inj->at(FaultPhase::Backward, s);
  }
  t.wait = Clock::now();
  tracer.span("forward", Tracer::kTrain, t.forward, t.backward, ta);
  tracer.span("backward", Tracer::kTrain, t.backward, t.wait, ta);
}

// What backward left of the all-reduce, then the summed control block (R5 flags, samples).
ControlBlock Trainer::Impl::reduce(int64_t s) {
  inj->at(FaultPhase::Allreduce, s);
  ActivityBoard::WaitScope waiting(watch.board());
  return exact ? exact->finish() : reducer.finish();
}

void Trainer::Impl::apply(int64_t s, const TraceArgs& ta, StepTimes& t) {
  t.optimizer = Clock::now();
  tracer.span("allreduce wait", Tracer::kTrain, t.wait, t.optimizer, ta);
  if (!exact) trace_buckets(ta);
  inj->at(FaultPhase::Optimizer, s);
  {
    NoGradGuard ng;
    optimizer.step();  // the only writer of parameters (R1)
  }
  t.end = Clock::now();
  tracer.span("optimizer", Tracer::kTrain, t.optimizer, t.end, ta);
  tracer.span("step", Tracer::kTrain, t.began, t.end, ta);
  state.set_step(s);
  log::set_step(s);
  const Duration step_time = t.end - t.began;
  watch.end_step(step_time);
  inj->step_took(s, step_time);  // a slow spec's reference
  if (recovery.control()) recovery.control()->set_step(s);
}

// The step's bucket all-reduces, one lane each (they overlap backward and each other).
void Trainer::Impl::trace_buckets(const TraceArgs& ta) {
  for (int b = 0; b < reducer.num_buckets(); ++b) {
    const auto [begin, end] = reducer.bucket_times(b);
    TraceArgs a = ta;
    a.bucket = b;
    tracer.span("allreduce", Tracer::kComm + b, begin, end, a);
  }
}

std::optional<WorkerEvent> Trainer::Impl::after_apply(int64_t s, const ControlBlock& sums, StepRates& rates) {
  report_progress(s, sums, rates);
  if (cfg.verify_every > 0 && (s + 1) % cfg.verify_every == 0)
    if (const auto failed = verify_replicas(s)) return failed;
  // The stop's step and the job's last hold the final state, whether saved here or (the
  // writer busy: deferred) by final_save: a Final save may be staged (ckpt/staging.h).
  const bool last = sums.stop > 0 || s + 1 == cfg.steps;
  checkpointing.after_step(origin(), sums.checkpoint > 0 || sums.stop > 0,
                           last ? ckpt::SaveKind::Final : ckpt::SaveKind::Periodic);
  report_checkpoint_failures();
  if (sums.stop > 0) return WorkerEvent{WorkerEventKind::StopRequested};      // R5: everyone stops after s
  if (sums.reconfigure > 0) return WorkerEvent{WorkerEventKind::Reconfigure};  // R5: everyone leaves g after s
  return std::nullopt;
}

// The launcher's live line (the global loss, the throughput over about a second), the audit
// line, the program's on_step and rank 0's log line.
void Trainer::Impl::report_progress(int64_t s, const ControlBlock& sums, StepRates& rates) {
  const double loss = step_loss();
  const double live = rates.add(sums.samples);
  if (recovery.control()) recovery.control()->set_progress(loss, live);
  result.final_loss = loss;
  if (audit_->enabled())
    audit_->record("apply", current.plan.generation, s, state.current_digest(), current.rank, current.world,
                   {{"loss", loss}});
  if (cfg.on_step) {
    cfg.on_step(s, loss);
    state.state_changed();  // user code may have written S (a test corrupts a replica)
  }
  if (cfg.log_interval > 0 && current.rank == 0 && ((s + 1) % cfg.log_interval == 0 || s + 1 == cfg.steps))
    log::info("worker", "step ", s + 1, "/", cfg.steps, "  W ", current.world, "  loss ", fixed(loss, 4), "  ",
              fixed(rates.take_log_rate(), 0), " samples/s");
}

std::optional<WorkerEvent> Trainer::Impl::verify_replicas(int64_t s) {
  try {
    recovery.verify(static_cast<uint64_t>(s), "verify-every");
  } catch (const comm::CommError& e) {
    if (!recovery.control()) throw;  // fault tolerance off: nothing to recover with
    recovery.failure(e);
    return WorkerEvent{WorkerEventKind::StepFailed, StepFailure::Transport};
  } catch (const DivergenceError& e) {
    // Never continue, and never let a restart paper over it: revoke g so that every rank
    // reports its (s, digest); the coordinator's plan finds the holders of T disagreeing and
    // stops the whole job naming them (docs/protocol.md step 4).
    log::error("worker", e.what());
    elastic::ControlPlane* client = recovery.control();
    if (!client) throw;
    if (!recovery.generation_over()) client->failure_report(current.plan.generation, s, std::nullopt, e.what());
    return WorkerEvent{WorkerEventKind::StepFailed, StepFailure::Divergence};
  }
  return std::nullopt;
}

}  // namespace rf::ddp
