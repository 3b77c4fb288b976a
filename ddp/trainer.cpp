#include "ddp/trainer.h"

#include <cstdio>
#include <iostream>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <optional>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "base/thread_sched.h"
#include "ckpt/async_checkpointer.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/resume.h"
#include "comm/communicator.h"
#include "comm/errors.h"
#include "comm/file_store.h"
#include "comm/local_launcher.h"
#include "core/autograd.h"
#include "core/data/data.h"
#include "ddp/activity.h"
#include "ddp/audit_log.h"
#include "ddp/checkpoint_policy.h"
#include "ddp/elastic_store.h"
#include "ddp/fault_injector.h"
#include "ddp/op_plan.h"
#include "ddp/train_state.h"
#include "elastic/client.h"

namespace rf::ddp {

using elastic::FaultPhase;
using namespace std::chrono_literals;

namespace {
double ms_since(TimePoint t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
std::chrono::milliseconds whole_ms(Duration d) {
  return std::max(std::chrono::milliseconds(1), std::chrono::ceil<std::chrono::milliseconds>(d));
}

// A digest (32 hex characters) as 4 u64 words for the all-gather.
void digest_words(const std::string& hex, uint64_t* out) {
  char buf[32] = {};
  std::memcpy(buf, hex.data(), std::min<size_t>(hex.size(), 32));
  std::memcpy(out, buf, 32);
}
std::string words_digest(const uint64_t* w) { return std::string(reinterpret_cast<const char*>(w), 32); }

// Why the training loop handed control back to recovery.
enum class Leave { Recover, Finished, Stopped };
}  // namespace

struct Trainer::Impl {
  nn::Module& model;
  LossFn loss_fn;
  const data::Dataset& ds;
  optim::Optimizer& optimizer;
  TrainerConfig cfg;
  data::Sampler sampler;
  Reducer reducer;
  TrainState state;

  elastic::ClientOptions copt;
  std::unique_ptr<elastic::Client> client;
  std::unique_ptr<FaultInjector> inj;
  std::unique_ptr<AuditLog> audit_;

  // The communicator of the generation this worker works in. The heartbeat thread aborts
  // it on revocation (step 1); the training thread swaps it between generations.
  std::mutex comm_mu;
  std::shared_ptr<comm::Communicator> comm;

  elastic::Plan plan;
  int rank = 0, world = 1;
  std::vector<std::byte> staging;  // the image buffer, reused by every transfer (R6)
  uint64_t staging_size = 0;
  std::thread staging_thread;      // faults `staging` in once (start_staging_pretouch)
  std::vector<int32_t> y_buf;
  TrainerResult result;
  std::unique_ptr<ckpt::AsyncCheckpointer> checkpointer;  // made when this worker is rank 0
  // D3: the bound learned from this worker's step times, and what the training thread does
  // (read by the heartbeat thread for the coordinator's judgement, elastic/liveness.h).
  StallBound stall;
  ActivityBoard activity;
  int64_t saved_step = -1;
  bool ckpt_deferred = false;  // a periodic checkpoint waits for the writer (checkpoint_policy.h)

  Impl(nn::Module& m, LossFn l, const data::Dataset& d, optim::Optimizer& o, TrainerConfig c)
      : model(m), loss_fn(std::move(l)), ds(d), optimizer(o), cfg(std::move(c)),
        sampler(d.n, cfg.global_batch, cfg.seed), reducer(m.named_parameters(), cfg.reducer), state(m, o, cfg.model_name),
        stall(cfg.stall) {}

  // A revocation aborts (peers that hear of it from us fail as aborted, blaming nobody);
  // self-fencing (D4) aborts as failed: the coordinator has not revoked anything yet, so
  // peers must fail naming this rank and report it (comm::Communicator::abort_failed).
  void abort_comm(const std::string& why, bool as_failed = false) {
    std::lock_guard<std::mutex> lk(comm_mu);
    if (comm && as_failed) comm->abort_failed(why);
    else if (comm) comm->abort(why);
  }

  // Destroys the communicator outside the lock: its destructor may run the chunk hook.
  void drop_comm() {
    std::shared_ptr<comm::Communicator> old;
    {
      std::lock_guard<std::mutex> lk(comm_mu);
      old.swap(comm);
    }
    reducer.abandon();
    old.reset();
  }

  bool generation_over() const {
    return client && (client->fenced() || client->seen_generation() > plan.generation);
  }

  elastic::StateReport report() const {
    // A worker that never applied a step holds nothing worth sending: it reports no
    // state, and when nobody holds any the plan says fresh_start (everyone starts from
    // the identical initial state their program built from the seed).
    if (state.step() < 0) return {};
    return {true, state.step(), state.current_digest()};
  }

  // Steps 5-7 for the plan just received. Returns false when the generation was revoked
  // on the way (go back to step 2).
  bool form_generation() {
    const Duration bound = stall.recovery_bound(state.image_size());  // its work is the state's size
    activity.compute(ActivityBoard::Region::Recovery, static_cast<int64_t>(plan.generation), bound);
    const elastic::PlanRank* me = plan.find(copt.slot);
    if (!me) throw Error(str("plan of generation ", plan.generation, " does not include slot ", copt.slot));
    rank = me->rank;
    world = plan.world();
    inj->set_rank(rank);
    if (plan.fresh_start) {
      try {
        if (!plan.whole_job_restart) {
          refuse_foreign_checkpoints();
        } else if (restore_own_checkpoint()) {
          return false;  // holds this job's newest checkpoint now: a new round plans from it
        }
      } catch (const InvalidInput& e) {
        // Every worker and every restart would refuse the same way: the coordinator STOPs
        // the job with this error (the launcher's last line), instead of restarting us.
        try {
          client->fatal(e.what());
        } catch (const Error& fe) {
          std::fprintf(stderr, "ringfence worker slot %d: could not tell the coordinator: %s\n", copt.slot, fe.what());
        }
        throw;
      }
    }
    const int64_t redo = plan.target_step + 1;
    inj->on_plan(redo, plan.fresh_start);
    inj->at(FaultPhase::Recovery, redo);

    // Step 5: connect.
    TimePoint t0 = Clock::now();
    comm::CommOptions co;
    co.rank = rank;
    co.world = world;
    co.generation = plan.generation;
    co.stall_timeout = whole_ms(StallBound::comm_stall(bound));
    co.connect_timeout = cfg.connect_timeout;
    co.flight_recorder_path = cfg.flight_recorder;
    if (!inj->empty()) co.on_chunk = [this](const comm::ChunkEvent& e) { inj->on_chunk(e.step, e.chunks_done); };
    try {
      // Connecting waits for every peer to reach this point and publish its address: it has
      // its own deadline (connect_timeout) and ends at a revocation (ElasticStore), and a
      // peer stuck before it is judged on its own activity; so it is not judged (idle).
      ElasticStore store(*client, plan.generation);
      activity.idle();
      co.store = &store;
      auto c = comm::make_communicator(comm::Backend::Ucx, co);
      activity.compute(ActivityBoard::Region::Recovery, static_cast<int64_t>(plan.generation), bound);
      std::lock_guard<std::mutex> lk(comm_mu);
      comm = std::move(c);
    } catch (const comm::CommError& e) {
      std::fprintf(stderr, "ringfence worker slot %d: generation %llu: connect failed: %s\n", copt.slot,
                   static_cast<unsigned long long>(plan.generation), e.what());
      return false;
    }
    if (generation_over()) return false;  // revoked before the abort hook could see comm
    const double connect_ms = ms_since(t0);

    // Step 6: transfer S_T to every rank behind T (R6 on the receiving side).
    t0 = Clock::now();
    await_staging();
    const double staging_wait_ms = ms_since(t0);
    try {
      if (plan.fresh_start) {
        state.set_step(-1);
        audit_->record("start", plan.generation, -1, state.current_digest(), rank, world);
      } else {
        // The image's size travels first (comm's receives name their size), then the
        // image itself: the same safetensors bytes a disk checkpoint holds.
        std::vector<comm::WorkPtr> sends;
        bool involved = me->source_rank.has_value();
        for (const auto& pr : plan.ranks)
          if (pr.source_rank == rank) involved = true;
        if (involved) inj->at(FaultPhase::Transfer, redo);
        const comm::OpId size_op = OpPlan::transfer_size(static_cast<uint64_t>(redo));
        const comm::OpId image_op = OpPlan::transfer_image(static_cast<uint64_t>(redo));
        for (const auto& pr : plan.ranks) {
          if (pr.source_rank != rank) continue;
          if (sends.empty()) {
            state.write_image(plan.generation, world, staging);
            staging_size = staging.size();
          }
          sends.push_back(comm->send_start(pr.rank, &staging_size, sizeof staging_size, size_op));
          sends.push_back(comm->send_start(pr.rank, staging.data(), staging.size(), image_op));
        }
        {
          ActivityBoard::WaitScope waiting(activity);
          for (auto& w : sends) w->wait();
        }
        if (me->source_rank) {
          // Where a receiver's step 6 goes (its audit line; recovery_bench prints them): the
          // staging wait above, the size (sent once the source's image is written, so this
          // wait is the source's serialisation), the image itself, then R6's validation and
          // the copy in. restore_verified leaves the digest memo set (no pass after the swap).
          TimePoint tp = Clock::now();
          uint64_t size = 0;
          {
            ActivityBoard::WaitScope waiting(activity);
            comm->recv(*me->source_rank, &size, sizeof size, size_op);
          }
          if (size > (uint64_t{1} << 40)) throw InvalidInput(str("state image of ", size, " bytes announced"));
          const double size_ms = ms_since(tp);
          // The staging buffer of R6, pre-touched at start (start_staging_pretouch): grown only if
          // this image is larger, never shrunk (a shrink then a grow would zero-fill again).
          if (size > staging.size()) staging.resize(size);
          tp = Clock::now();
          {
            ActivityBoard::WaitScope waiting(activity);
            comm->recv(*me->source_rank, staging.data(), size, image_op);
          }
          const double image_ms = ms_since(tp);
          tp = Clock::now();
          state.restore_verified({staging.data(), size}, plan.target_step, plan.target_digest,
                                 str("state image from rank ", *me->source_rank, " (generation ", plan.generation, ")"));
          const double restore_ms = ms_since(tp);
          audit_->record("transfer", plan.generation, state.step(), state.current_digest(), rank, world,
                         str("\"source\":", *me->source_rank, ",\"staging_wait_ms\":", staging_wait_ms,
                             ",\"size_wait_ms\":", size_ms, ",\"image_ms\":", image_ms, ",\"restore_ms\":", restore_ms));
        }
      }
    } catch (const comm::CommError& e) {
      std::fprintf(stderr, "ringfence worker slot %d: generation %llu: transfer failed: %s\n", copt.slot,
                   static_cast<unsigned long long>(plan.generation), e.what());
      failure(e);
      return false;
    } catch (const InvalidInput& e) {
      // A damaged image (R6 kept the old state): this generation cannot start; say so and
      // go round again (a new round picks a source again).
      std::fprintf(stderr, "ringfence worker slot %d: generation %llu: state transfer refused: %s\n", copt.slot,
                   static_cast<unsigned long long>(plan.generation), e.what());
      if (!generation_over()) client->failure_report(plan.generation, state.step(), std::nullopt, e.what());
      return false;
    }
    const double transfer_ms = ms_since(t0);

    // Step 7: every rank must hold the same (T, S).
    t0 = Clock::now();
    try {
      verify_digests(static_cast<uint64_t>(redo), "recovery");
    } catch (const comm::CommError& e) {
      failure(e);
      return false;
    }
    const double verify_ms = ms_since(t0);
    client->set_step(state.step());
    client->phase_timing(plan.generation, "connect", connect_ms);
    client->phase_timing(plan.generation, "transfer", transfer_ms);
    client->phase_timing(plan.generation, "verify", verify_ms);
    return true;
  }

  // All-gather of digests; DivergenceError names every rank's digest on a mismatch.
  void verify_digests(uint64_t tag_step, const char* when) {
    // (step, digest) of every rank: 1 + 4 words each.
    const std::string mine = state.current_digest();
    std::vector<uint64_t> in(5), out(5 * static_cast<size_t>(world));
    in[0] = static_cast<uint64_t>(state.step());
    digest_words(mine, in.data() + 1);
    {
      ActivityBoard::WaitScope waiting(activity);
      comm->allgather({in.data(), in.size(), comm::DType::u64}, {out.data(), out.size(), comm::DType::u64},
                      OpPlan::verify(tag_step));
    }
    std::string bad;
    for (int r = 0; r < world; ++r) {
      const uint64_t* w = out.data() + 5 * r;
      const std::string d = words_digest(w + 1);
      if (d != mine || w[0] != in[0])
        bad += str(" rank ", r, " has step ", static_cast<int64_t>(w[0]), " digest ", d, ";");
    }
    if (!bad.empty())
      throw DivergenceError(str("replicas diverged (", when, ", generation ", plan.generation, "): rank ", rank,
                                " has step ", state.step(), " digest ", mine, ";", bad));
  }

  // A transport error, stall or abort seen by the training thread (step 1 from our side):
  // tell the coordinator who failed, unless it already moved on.
  void failure(const comm::CommError& e) {
    if (!client) throw;  // fault tolerance off: nothing to recover with
    if (generation_over()) return;
    // Aborted, ours or relayed by a peer's farewell, means the coordinator revoked g (step
    // 1): it knows, and a report naming no peer would name this live worker as the failed one.
    if (dynamic_cast<const comm::Aborted*>(&e)) return;
    std::optional<int> peer_slot;
    if (e.peer() >= 0 && e.peer() < world) peer_slot = plan.ranks[e.peer()].worker.slot;
    try {
      client->failure_report(plan.generation, state.step(), peer_slot, e.what());
    } catch (const Error& re) {
      std::fprintf(stderr, "ringfence worker slot %d: failure report: %s\n", copt.slot, re.what());
    }
  }

  // The staging buffer of step 6 is as large as the state image (parameters + optimizer
  // buffers: 800 MB for 100M parameters with momentum). Faulting it in during a transfer
  // would cost ~13 us per 4 KiB page here (2.6 s for 800 MB), so it is faulted in once,
  // ahead of need — on a thread of its own started right after join(), so a replacement
  // reports at once and its page faults overlap the round, the connect and the source's
  // serialisation instead of delaying all of them (await_staging() before step 6 and
  // before training). Only the pages are wanted: a zero fill of the image's size, not an
  // image (no digest, no CRCs). The slack covers the header's few varying digits (step,
  // generation); the buffer is never shrunk, so it stays resident.
  // (TrainState::prepare_staging: the pages made resident by one madvise, then the fill.)
  void start_staging_pretouch() {
    staging_thread = std::thread([this] { state.prepare_staging(staging); });
  }
  void await_staging() {
    if (staging_thread.joinable()) staging_thread.join();
  }

  // Rank 0 alone writes (every replica holds the same S, R4); the directory's writer lock
  // is taken when this worker first is rank 0 (a rank 0 that died released it).
  void checkpoint(bool force) {
    if (cfg.ckpt_dir.empty() || rank != 0 || state.step() < 0 || state.step() == saved_step) return;
    const CheckpointAction act = checkpoint_action(state.step(), cfg.ckpt_every, force, ckpt_deferred,
                                                   checkpointer && checkpointer->writing());
    ckpt_deferred = act == CheckpointAction::Defer;
    if (act != CheckpointAction::Save) return;
    if (!checkpointer)
      checkpointer = std::make_unique<ckpt::AsyncCheckpointer>(
          ckpt::CheckpointerOptions{.dir = cfg.ckpt_dir, .keep = cfg.ckpt_keep}, &std::cerr);
    ckpt::SnapshotMeta meta;
    meta.model = cfg.model_name;
    meta.step = state.step();
    meta.generation = static_cast<int64_t>(plan.generation);
    meta.world_size = world;
    meta.optimizer = optimizer.kind();
    meta.job_id = plan.job_id;
    checkpointer->save(model, optimizer, meta);
    saved_step = state.step();
  }

  // A fresh start (nobody holds state: the job's first generation) without `resume` into a
  // ckpt_dir that already holds checkpoints: they are another run's, and this job's rank 0
  // would replace them (same names) and prune the rest — the one-process rule
  // (models/train_loop.cpp) applied by every worker, before any step and before connecting.
  // Every worker sees the same plan and checks its own directory (any of them may be rank 0
  // later). A replacement never gets here: it joins a job whose members hold state, so its
  // plan is no fresh start, and with `resume` the files are this lineage's.
  // (A job whose every worker died is no first generation: see restore_own_checkpoint.)
  void refuse_foreign_checkpoints() const {
    if (cfg.resume || cfg.ckpt_dir.empty()) return;
    const auto existing = ckpt::list_checkpoints(cfg.ckpt_dir);
    if (existing.empty()) return;
    throw InvalidInput(str("--ckpt-dir ", cfg.ckpt_dir, " already holds checkpoints (newest ", existing.front().path,
                           ") and this job starts fresh; pass --resume to continue from them, or choose another "
                           "directory"));
  }

  // `resume`: the newest valid checkpoint in ckpt_dir, of this model and optimizer; with a
  // job id, also written by that job. Returns false when there is none (start fresh).
  bool restore_from_disk(const std::string& job_id = "") {
    ckpt::RestoreExpect expect;
    expect.model = cfg.model_name;
    expect.optimizer = optimizer.kind();
    expect.job_id = job_id;
    auto point = ckpt::resume_newest(cfg.ckpt_dir, model, optimizer, expect, std::cerr);
    if (!point) return false;
    state.set_step(point->meta.step);
    saved_step = point->meta.step;
    result.resumed_step = point->meta.step;
    std::fprintf(stderr, "ringfence worker slot %d: resumed from %s (step %lld)\n", copt.slot, point->path.c_str(),
                 static_cast<long long>(point->meta.step));
    audit_->record("resume", plan.generation, state.step(), state.current_digest(), -1, 0);
    return true;
  }

  // PROTOCOL.md "Whole-job failure" without `resume`: the plan is a fresh start, but a
  // generation of this job ran before (Plan::whole_job_restart), so every worker that held
  // state is gone and the only committed state left is on disk. Each worker restores the
  // newest valid checkpoint its ckpt_dir holds *of this job* (the job id every checkpoint
  // records; a file of another job is refused, as at the first fresh start) and revokes
  // this generation, so the next round plans from what everyone now reports: T = the newest
  // restored step, its holders' digests must agree (step 4), and a worker that found none
  // (another node's directory) receives S_T from a holder. Returns false when there is
  // nothing to restore: the job starts again from step 0, as its first generation did
  // (quietly when the directory holds no checkpoint at all: nothing was lost).
  bool restore_own_checkpoint() {
    if (cfg.ckpt_dir.empty() || ckpt::list_checkpoints(cfg.ckpt_dir).empty()) return false;
    if (!restore_from_disk(plan.job_id)) return false;
    const std::string why = str("restored step ", state.step(), " from disk after a whole-job failure; re-planning");
    std::fprintf(stderr, "ringfence worker slot %d: generation %llu: %s\n", copt.slot,
                 static_cast<unsigned long long>(plan.generation), why.c_str());
    if (!generation_over()) client->failure_report(plan.generation, state.step(), std::nullopt, why);
    return true;
  }

  Leave train_generation() {
    TimePoint window_t = Clock::now();
    int64_t window_samples = 0;
    while (state.step() + 1 < cfg.steps) {
      if (generation_over()) return Leave::Recover;
      const int64_t s = state.step() + 1;  // R2: contribute to s only after applying s-1
      const TimePoint step_began = Clock::now();
      const Duration bound = stall.step_bound();
      activity.compute(ActivityBoard::Region::Step, s, bound);
      // Without fault tolerance a stall is fatal: it keeps the fixed ceiling.
      if (client) comm->set_stall_timeout(StallBound::comm_stall(bound));
      const auto idx = sampler.local_batch(s, rank, world);
      const int64_t b = static_cast<int64_t>(idx.size());
      // The batch goes straight into a tensor from the caching allocator (same size every
      // step: no page faults).
      Tensor x;
      y_buf.resize(static_cast<size_t>(b));
      if (b) {
        x = Tensor::empty({b, ds.c, ds.h, ds.w});
        data::gather_batch(ds, idx, x.data(), y_buf.data());
      }
      ControlBlock cb;
      cb.samples = b;
      cb.reconfigure = client && client->reconfigure_requested() ? 1 : 0;
      cb.stop = client && client->stop_requested() ? 1 : 0;

      ControlBlock sums;
      try {
        inj->at(FaultPhase::Forward, s);
        if (cfg.overlap_ab_period > 0) reducer.set_overlap(overlap_ab_on(s, cfg.overlap_ab_period));
        reducer.begin_step(*comm, static_cast<uint64_t>(s), cb);
        if (b > 0) {
          Tensor loss = loss_fn(model(x), y_buf);
          reducer.set_local_loss(loss.item());
          inj->at(FaultPhase::Backward, s);
          loss.backward();
        } else {
          inj->at(FaultPhase::Backward, s);
        }
        inj->at(FaultPhase::Allreduce, s);
        ActivityBoard::WaitScope waiting(activity);
        sums = reducer.finish();
      } catch (const comm::CommError& e) {
        // R1: the gradient of s is incomplete; nothing is applied.
        std::fprintf(stderr, "ringfence worker slot %d rank %d: step %lld not applied: %s\n", copt.slot, rank,
                     static_cast<long long>(s), e.what());
        reducer.abandon();
        failure(e);
        return Leave::Recover;
      }
      inj->at(FaultPhase::Optimizer, s);
      {
        NoGradGuard ng;
        optimizer.step();  // the only writer of parameters (R1)
      }
      state.set_step(s);
      const Duration step_time = Clock::now() - step_began;
      stall.observe(step_time);
      inj->step_took(s, step_time);  // a slow spec's reference
      if (client) client->set_step(s);
      result.final_loss = reducer.global_loss();
      if (audit_->enabled())
        audit_->record("apply", plan.generation, s, state.current_digest(), rank, world,
                     str("\"loss\":", reducer.global_loss()));
      if (cfg.on_step) {
        cfg.on_step(s, reducer.global_loss());
        state.state_changed();  // user code may have written S (a test corrupts a replica)
      }
      window_samples += sums.samples;
      if (cfg.log_interval > 0 && rank == 0 && ((s + 1) % cfg.log_interval == 0 || s + 1 == cfg.steps)) {
        const double dt = seconds_since(window_t);
        std::fprintf(stderr, "step %lld/%lld  g %llu  W %d  loss %.4f  %.0f samples/s\n",
                     static_cast<long long>(s + 1), static_cast<long long>(cfg.steps),
                     static_cast<unsigned long long>(plan.generation), world, reducer.global_loss(),
                     dt > 0 ? window_samples / dt : 0.0);
        window_t = Clock::now();
        window_samples = 0;
      }
      if (cfg.verify_every > 0 && (s + 1) % cfg.verify_every == 0) {
        try {
          verify_digests(static_cast<uint64_t>(s), "verify-every");
        } catch (const comm::CommError& e) {
          failure(e);
          return Leave::Recover;
        } catch (const DivergenceError& e) {
          // Never continue, and never let a restart paper over it: revoke g so that every
          // rank reports its (s, digest); the coordinator's plan finds the holders of T
          // disagreeing and stops the whole job naming them (PROTOCOL.md step 4).
          std::fprintf(stderr, "ringfence worker slot %d: %s\n", copt.slot, e.what());
          if (!client) throw;
          if (!generation_over()) client->failure_report(plan.generation, s, std::nullopt, e.what());
          return Leave::Recover;
        }
      }
      checkpoint(sums.checkpoint > 0 || sums.stop > 0);
      if (checkpointer) checkpointer->report();
      if (sums.stop > 0) return Leave::Stopped;          // R5: everyone stops after s
      if (sums.reconfigure > 0) return Leave::Recover;   // R5: everyone leaves g after s
    }
    return Leave::Finished;
  }

  // Fault tolerance off: one generation from comm's local launcher, the same step loop.
  TrainerResult run_plain() {
    // One generation, always a fresh start: without a coordinator the ranks could not agree
    // on which checkpoint to continue from.
    if (cfg.resume) throw InvalidInput("resume needs fault tolerance (fault_tolerance = true, under ringfence run)");
    const comm::RankEnv env = comm::rank_env_from_environment();
    copt.slot = env.rank;
    rank = env.rank;
    world = env.world;
    plan.generation = 1;
    inj = std::make_unique<FaultInjector>();
    audit_ = std::make_unique<AuditLog>(cfg.audit_log, env.rank, 0);
    comm::prepare_backend(comm::Backend::Ucx);
    refuse_foreign_checkpoints();
    comm::FileStore store(env.store_dir);
    comm::CommOptions co;
    co.store = &store;
    co.rank = rank;
    co.world = world;
    co.generation = 1;
    co.stall_timeout = whole_ms(cfg.stall.ceiling);  // no coordinator, no recovery: the fixed D3
    co.connect_timeout = cfg.connect_timeout;
    co.flight_recorder_path = cfg.flight_recorder;
    comm = comm::make_communicator(comm::Backend::Ucx, co);
    const TimePoint t0 = Clock::now();
    train_generation();
    checkpoint(true);
    if (checkpointer) checkpointer->flush();
    result.train_seconds = seconds_since(t0);
    drop_comm();
    result.step = state.step();
    result.digest = state.digest();
    result.generation = 1;
    result.world = world;
    return result;
  }

  // The heartbeat thread calls back into this object (abort_comm): stop it before any
  // member goes, also when run() ended with an exception.
  ~Impl() {
    await_staging();
    if (client) client->close();
  }

  TrainerResult run() {
    if (cfg.overlap_ab_period < 0)
      throw InvalidInput(str("overlap_ab_period must be >= 0 (0 = off), not ", cfg.overlap_ab_period));
    if (!cfg.fault_tolerance) return run_plain();
    copt = elastic::ClientOptions::from_env();
    inj = FaultInjector::from_env(copt.incarnation, copt.slot);
    inj->set_drop([this] {
      std::lock_guard<std::mutex> lk(comm_mu);
      if (comm) comm->inject_drop();
    });
    audit_ = std::make_unique<AuditLog>(cfg.audit_log, copt.slot, copt.incarnation);
    inj->set_before_fire([this](const elastic::FaultSpec& f, int64_t s) {
      // The launcher's report of specs that never fired hears it from the coordinator. Best
      // effort: a coordinator out of reach must not stop the fault from firing.
      try {
        if (client) client->injected(plan.generation, s, f.to_string());
      } catch (const Error& e) {
        std::fprintf(stderr, "ringfence worker slot %d: could not tell the coordinator about %s: %s\n", copt.slot,
                     f.to_string().c_str(), e.what());
      }
      // Last, just before the fault: bench/recovery measures recovery from this record, so
      // the call above must not be inside what it measures.
      audit_->record("inject", plan.generation, s, "", rank, world, str("\"spec\":\"", f.to_string(), "\""));
    });
    comm::prepare_backend(comm::Backend::Ucx);
    client = std::make_unique<elastic::Client>(copt);
    client->on_revoked([this](const elastic::Revocation& r) {
      abort_comm(str("generation revoked (", r.cause, "), now ", r.generation));
    });
    client->on_fenced([this](const std::string& why) { abort_comm(str("self-fenced (D4): ", why), true); });
    client->on_stopped([this] { abort_comm("the coordinator stopped the job"); });
    activity.attach_thread(current_tid());  // this is the training thread
    client->set_activity_source([this] { return activity.read(Clock::now()); });
    if (cfg.resume) {
      if (cfg.ckpt_dir.empty()) throw InvalidInput("resume needs a checkpoint directory (ckpt_dir)");
      // (the audit line marks where this run's lineage begins, also when nothing was restored)
      if (!restore_from_disk()) audit_->record("resume", 0, state.step(), state.current_digest(), -1, 0);
    }
    // A worker that joins after the job finished (a spare, or a restart that started up
    // while the last members left) has nothing to do: it ends as a standby, not an error.
    const auto join_unless_finished = [this] {
      try {
        client->join();
        return true;
      } catch (const elastic::JobFinished&) {
        result.standby = true;
        return false;
      }
    };
    const bool joined = join_unless_finished();
    if (joined) start_staging_pretouch();
    const TimePoint t0 = Clock::now();
    bool first = true;
    while (joined) {
      if (client->fenced() && !join_unless_finished()) break;  // D4: come back as a new member
      try {
        plan = client->next_plan([this] { return report(); }, cfg.plan_timeout);
      } catch (const elastic::JobFinished&) {
        result.standby = true;
        break;
      } catch (const elastic::Refused& e) {
        if (client->fenced()) continue;
        throw;
      }
      drop_comm();
      const bool formed = form_generation();
      activity.idle();  // ready() waits on the coordinator
      if (!formed) {
        drop_comm();
        continue;
      }
      const elastic::ReadyQuery rq = client->ready(plan.generation, cfg.ready_timeout);
      if (rq.kind == elastic::ReadyQuery::Stopped)
        throw elastic::JobStopped(str("the coordinator stopped the job: ", rq.error));
      if (rq.kind == elastic::ReadyQuery::Done) break;
      if (rq.kind != elastic::ReadyQuery::Running) {
        drop_comm();
        continue;
      }
      if (!first) ++result.recoveries;
      first = false;
      const Leave why = train_generation();
      activity.idle();
      if (why == Leave::Recover) {
        drop_comm();
        continue;
      }
      checkpoint(true);  // the final state (or the stop's) is on disk before we leave
      if (checkpointer) checkpointer->flush();
      client->leave();
      drop_comm();
      break;
    }
    result.train_seconds = seconds_since(t0);
    result.step = state.step();
    result.digest = state.digest();
    result.generation = plan.generation;
    result.world = world;
    client->close();
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
  p.generation = i.plan.generation;
  p.rank = i.rank;
  p.world = i.world;
  p.step = i.state.step();
  p.stop_requested = i.client && i.client->stop_requested();
  p.reconfigure_requested = i.client && i.client->reconfigure_requested();
  return p;
}

}  // namespace rf::ddp
