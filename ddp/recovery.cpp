#include "ddp/recovery.h"

#include <cstring>
#include <optional>

#include "base/clock.h"
#include "base/digest.h"
#include "base/enforce.h"
#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "ckpt/format_error.h"
#include "comm/flight_recorder.h"
#include "ddp/elastic_store.h"
#include "ddp/op_plan.h"
#include "elastic/auth.h"

namespace rf::ddp {

using elastic::FaultPhase;

namespace {
double ms_since(TimePoint t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A digest string, version prefix included ("x3:" + 32 hex), as kDigestWords u64 words
// for the all-gather, zero-padded: a peer's digest of another version arrives whole and
// is refused by same_digest below, never compared.
constexpr size_t kDigestWords = 6;
static_assert(kDigestChars <= 8 * kDigestWords);
void digest_words(const std::string& digest, uint64_t* out) {
  RF_ENFORCE(digest.size() <= 8 * kDigestWords, "digest '", digest, "' is longer than ", 8 * kDigestWords, " bytes");
  char buf[8 * kDigestWords] = {};
  std::memcpy(buf, digest.data(), digest.size());
  std::memcpy(out, buf, sizeof buf);
}
std::string words_digest(const uint64_t* w) {
  const char* c = reinterpret_cast<const char*>(w);
  return std::string(c, strnlen(c, 8 * kDigestWords));
}
}  // namespace

Recovery::Recovery(Parts p)
    : cfg_(p.cfg), cur_(p.current), state_(p.state), reducer_(p.reducer), watch_(p.watch), ckpt_(p.checkpointing),
      tracer_(p.tracer) {}

Recovery::~Recovery() {
  await_staging();
  if (!control_) return;
  control_->close();
  // Whoever else holds the control plane (a test's simulated coordinator) must not call back
  // into this object any more: clearing a callback waits for one in progress.
  control_->on_revoked(nullptr);
  control_->on_fenced(nullptr);
  control_->on_stopped(nullptr);
}

void Recovery::start(std::shared_ptr<elastic::ControlPlane> control, std::string token, FaultInjector& inj,
                     AuditLog& audit) {
  control_ = std::move(control);
  slot_ = control_->slot();
  token_ = std::move(token);
  inj_ = &inj;
  audit_ = &audit;
  if (!cfg_.seams.communicators) comm::prepare_backend(cfg_.backend);
  control_->on_revoked([this](const elastic::Revocation& r) {
    const char* cause = r.cause ? elastic::to_string(*r.cause) : "cause unknown";
    if (tracer_) tracer_->instant_any("revoked", cause, {.generation = static_cast<int64_t>(r.generation)});
    abort(str("generation revoked (", cause, "), now ", r.generation));
  });
  control_->on_fenced([this](const std::string& why) {
    if (tracer_) tracer_->instant_any("fenced", why);
    abort(str("self-fenced (D4): ", why), true);
  });
  control_->on_stopped([this] { abort("the coordinator stopped the job"); });
}

bool Recovery::join() {
  try {
    control_->join();
    return true;
  } catch (const elastic::JobFinished&) {
    return false;
  }
}

void Recovery::enter(std::optional<RecoveryPhase> phase) {
  // The trace: one span per phase, from entering it to entering the next (or training).
  if (tracer_ && tracer_->enabled() && traced_ != phase) {
    const TimePoint now = Clock::now();
    if (traced_)
      tracer_->span(recovery_phase_name(*traced_), Tracer::kTrain, traced_since_, now,
                    {.step = state_.step(), .generation = static_cast<int64_t>(cur_.plan.generation), .rank = cur_.rank});
    traced_ = phase;
    traced_since_ = now;
  }
  if (audit_) audit_->set_phase(phase);
  comm::set_phase_label(phase ? recovery_phase_name(*phase) : kTrainingPhaseLabel);
}

// ---- step 1 ---------------------------------------------------------------------------

// A revocation aborts (peers that hear of it from us fail as aborted, blaming nobody);
// self-fencing (D4) aborts as failed: the coordinator has not revoked anything yet, so
// peers must fail naming this rank and report it (comm::Communicator::abort_failed).
void Recovery::abort(const std::string& why, bool as_failed) {
  std::lock_guard<std::mutex> lk(cur_.comm_mu);
  if (cur_.comm && as_failed) cur_.comm->abort_failed(why);
  else if (cur_.comm) cur_.comm->abort(why);
}

void Recovery::inject_drop() {
  std::lock_guard<std::mutex> lk(cur_.comm_mu);
  if (cur_.comm) cur_.comm->inject_drop();
}

void Recovery::drop_comm() {
  std::shared_ptr<comm::Communicator> old;
  {
    std::lock_guard<std::mutex> lk(cur_.comm_mu);
    old.swap(cur_.comm);
  }
  reducer_.abandon();
  // NCCL forms the next generation from this one when ranks only left (comm/nccl/regroup.h):
  // it must still exist then. The UCX backend makes every generation afresh: it goes now.
  if (old && cfg_.backend == comm::Backend::Nccl) previous_ = std::move(old);
  old.reset();
}

void Recovery::forget_previous() { previous_.reset(); }

bool Recovery::generation_over() const {
  return control_ && (control_->fenced() || control_->seen_generation() > cur_.plan.generation);
}

// A transport error, stall or abort seen by the training thread (step 1 from our side).
void Recovery::failure(const comm::CommError& e) {
  RF_ENFORCE(control_, "a failure to recover from without a coordinator (fault tolerance off): ", e.what());
  enter(RecoveryPhase::Abort);
  if (e.info().device_stuck) {
    // Our own GPU never reached the operation: the peers can only say they waited (naming
    // nobody), so this worker names itself, even when the coordinator revoked g first.
    log::warn("recovery", "this worker's GPU is stuck (", e.what(), "); reporting it");
    if (control_->fenced()) return;
    try {
      ActivityBoard::IdleScope talking(watch_.board());
      control_->failure_report(cur_.plan.generation, state_.step(), slot_, e.what(), elastic::FailureKind::gpu_stuck);
    } catch (const Error& re) {
      log::warn("recovery", "failure report: ", re.what());
    }
    return;
  }
  if (generation_over()) return;
  // Aborted, ours or relayed by a peer's farewell, means the coordinator revoked g (step
  // 1): it knows, and a report naming no peer would name this live worker as the failed one.
  if (dynamic_cast<const comm::Aborted*>(&e)) return;
  std::optional<int> peer_slot;
  if (e.peer() >= 0 && e.peer() < cur_.world) peer_slot = cur_.plan.ranks[e.peer()].worker.slot;
  try {
    ActivityBoard::IdleScope talking(watch_.board());
    control_->failure_report(cur_.plan.generation, state_.step(), peer_slot, e.what());
  } catch (const Error& re) {
    log::warn("recovery", "failure report: ", re.what());
  }
}

// ---- steps 2-4 ------------------------------------------------------------------------

elastic::StateReport Recovery::state_report() const {
  // A worker that never applied a step holds nothing worth sending: it reports no
  // state, and when nobody holds any the plan says fresh_start (everyone starts from
  // the identical initial state their program built from the seed).
  elastic::StateReport r;
  r.comm_generation = regroup_generation(previous_.get());  // dropped into previous_ (report())
  if (state_.step() < 0) return r;
  r.has_state = true;
  r.step = state_.step();
  r.digest = state_.current_digest();
  return r;
}

WorkerEvent Recovery::report() {
  enter(RecoveryPhase::Report);
  drop_comm();  // kept in previous_ (NCCL): what state_report() says it can regroup from
  try {
    cur_.plan = control_->next_plan([this] { return state_report(); }, cfg_.plan_timeout);
  } catch (const elastic::JobFinished&) {
    return {WorkerEventKind::JobFinished};
  } catch (const elastic::Refused&) {
    if (control_->fenced()) return {WorkerEventKind::Fenced};
    throw;
  }
  return {WorkerEventKind::PlanReceived};
}

// ---- plan, steps 5-7 ------------------------------------------------------------------

// A call to the coordinator that meets a lost leader (several replicas) has self-fenced the
// client and says so (Refused): this generation will not form for this worker, which joins
// the next leader as a new member.
WorkerEvent Recovery::form() {
  try {
    return {form_steps() ? WorkerEventKind::Formed : WorkerEventKind::FormFailed};
  } catch (const elastic::Refused&) {
    if (control_->fenced()) return {WorkerEventKind::FormFailed};
    throw;
  }
}

bool Recovery::form_steps() {
  if (!plan()) return false;
  TimePoint t0 = Clock::now();
  if (!connect()) return false;
  const double connect_ms = ms_since(t0);
  t0 = Clock::now();
  if (!transfer()) return false;
  const double transfer_ms = ms_since(t0);

  // Step 7: every rank must hold the same (T, S).
  enter(RecoveryPhase::Verify);
  t0 = Clock::now();
  try {
    verify(static_cast<uint64_t>(cur_.plan.target_step + 1), "recovery");
  } catch (const comm::CommError& e) {
    failure(e);
    return false;
  }
  const double verify_ms = ms_since(t0);
  control_->set_step(state_.step());
  log::set_step(state_.step());  // T, received or kept
  ActivityBoard::IdleScope talking(watch_.board());  // the recovery's own work is done
  control_->phase_timing(cur_.plan.generation, elastic::RecoveryPhase::Connect, connect_ms);
  control_->phase_timing(cur_.plan.generation, elastic::RecoveryPhase::Transfer, transfer_ms);
  control_->phase_timing(cur_.plan.generation, elastic::RecoveryPhase::Verify, verify_ms);
  return true;
}

bool Recovery::plan() {
  enter(RecoveryPhase::Plan);
  const elastic::Plan& plan = cur_.plan;
  comm_stall_ = watch_.begin_recovery(plan.generation, state_.image_size());
  const elastic::PlanRank* me = plan.find(slot_);
  if (!me) throw Error(str("plan of generation ", plan.generation, " does not include slot ", slot_));
  cur_.rank = me->rank;
  cur_.world = plan.world();
  inj_->set_rank(cur_.rank);
  log::set_rank(cur_.rank);
  log::set_generation(plan.generation);
  if (plan.fresh_start) {
    try {
      if (!plan.whole_job_restart) {
        ckpt_.refuse_foreign();
      } else if (ckpt_.restore_own(plan.job_id, plan.generation)) {
        // Holds this job's newest checkpoint now: revoke this generation, so that the next
        // round plans from what everyone reports (T = the newest restored step, its holders'
        // digests must agree, step 4; a worker that found none receives S_T from a holder).
        const std::string why = str("restored step ", state_.step(), " from disk after a whole-job failure; re-planning");
        log::info("recovery", why);
        ActivityBoard::IdleScope talking(watch_.board());
        if (!generation_over()) control_->failure_report(plan.generation, state_.step(), std::nullopt, why);
        return false;
      }
    } catch (const InvalidInput& e) {
      tell_fatal(e.what());  // every worker and every restart would refuse the same way
      throw;
    }
  }
  const int64_t redo = plan.target_step + 1;
  inj_->on_plan(redo, plan.fresh_start);
  inj_->at(FaultPhase::Recovery, redo);
  return true;
}

// Step 5: the only place a communicator of a recovered generation is made.
bool Recovery::connect() {
  enter(RecoveryPhase::Connect);
  const elastic::Plan& plan = cur_.plan;
  comm::CommOptions co;
  co.rank = cur_.rank;
  co.world = cur_.world;
  co.generation = plan.generation;
  co.stall_timeout = comm_stall_;
  co.connect_timeout = cfg_.connect_timeout;
  co.flight_recorder_path = cfg_.flight_recorder;
  place_comm(co, reducer_.device());
  co.members = plan_members(plan);
  co.regroup = plan_regroup(plan);  // the coordinator's word, the same for every rank
  if (!token_.empty()) {  // the data plane admits only the job's members (comm/tag.h)
    const auto k = elastic::data_plane_key(token_, plan.job_id, plan.generation);
    co.tag_key = comm::TagKey{.enabled = true, .key = {k[0], k[1]}};
  }
  // Used by this connect only (shrink or not, the next generation is made from it once).
  co.previous = std::move(previous_);
  if (!inj_->empty()) co.on_chunk = [this](const comm::ChunkEvent& e) { inj_->on_chunk(e.step, e.chunks_done); };
  try {
    // Connecting waits for every peer to reach this point and publish its address: it has
    // its own deadline (connect_timeout) and ends at a revocation (ElasticStore), and a
    // peer stuck before it is judged on its own activity; so it is not judged (idle).
    ElasticStore store(*control_, plan.generation);
    watch_.idle();
    co.store = &store;
    auto c = cfg_.seams.communicators ? cfg_.seams.communicators(co) : comm::make_communicator(cfg_.backend, co);
    watch_.continue_recovery();
    std::lock_guard<std::mutex> lk(cur_.comm_mu);
    cur_.comm = std::move(c);
  } catch (const comm::CommError& e) {
    log::warn("recovery", "connect failed: ", e.what());
    // Reported like a failed transfer or verify: the round has a plan and waits for every
    // rank's ready, so without a revocation this worker's next report (for g+1) would find
    // no open round until the ready timeout. An abort is not reported (the coordinator
    // revoked g, or a peer that failed says so itself).
    failure(e);
    return false;
  }
  return !generation_over();  // revoked before the abort hook could see comm
}

// Step 6: S_T to every rank behind T (R6 on the receiving side).
bool Recovery::transfer() {
  enter(RecoveryPhase::Transfer);
  const elastic::Plan& plan = cur_.plan;
  const elastic::PlanRank* me = plan.find(slot_);
  const int64_t redo = plan.target_step + 1;
  const TimePoint t0 = Clock::now();
  await_staging();
  const double staging_wait_ms = ms_since(t0);
  try {
    if (plan.fresh_start) {
      start_fresh();
      return true;
    }
    send_images(redo);
    if (me->source_rank) receive_image(*me->source_rank, redo, staging_wait_ms);
    return true;
  } catch (const comm::CommError& e) {
    log::warn("recovery", "transfer failed: ", e.what());
    failure(e);
    return false;
  } catch (const ckpt::DigestVersionMismatch& e) {
    // The source's digests are of another version (another ringfence build): every
    // generation's transfer would refuse the same way, so the coordinator stops the job.
    log::error("recovery", "state transfer refused: ", e.what());
    tell_fatal(e.what());
    throw;
  } catch (const InvalidInput& e) {
    // A damaged image (R6 kept the old state): this generation cannot start; say so and
    // report again (the next plan picks a source again).
    log::warn("recovery", "state transfer refused: ", e.what());
    ActivityBoard::IdleScope talking(watch_.board());
    if (!generation_over()) control_->failure_report(plan.generation, state_.step(), std::nullopt, e.what());
    return false;
  }
}

// Nobody holds state: every rank starts from the initial state its program built.
void Recovery::start_fresh() {
  state_.set_step(-1);
  audit_->record("start", cur_.plan.generation, -1, state_.current_digest(), cur_.rank, cur_.world);
}

// The image's size travels first (comm's receives name their size), then the image itself:
// the same safetensors bytes a disk checkpoint holds, written once for every receiver.
void Recovery::send_images(int64_t redo) {
  const elastic::Plan& plan = cur_.plan;
  const int rank = cur_.rank;
  bool involved = plan.find(slot_)->source_rank.has_value();
  for (const auto& pr : plan.ranks)
    if (pr.source_rank == rank) involved = true;
  if (involved) inj_->at(FaultPhase::Transfer, redo);
  const comm::OpId size_op = OpPlan::transfer_size(static_cast<uint64_t>(redo));
  const comm::OpId image_op = OpPlan::transfer_image(static_cast<uint64_t>(redo));
  std::vector<comm::WorkPtr> sends;
  for (const auto& pr : plan.ranks) {
    if (pr.source_rank != rank) continue;
    if (sends.empty()) {
      state_.write_image(plan.generation, cur_.world, staging_);
      staging_size_ = staging_.size();
    }
    sends.push_back(cur_.comm->send_start(pr.rank, &staging_size_, sizeof staging_size_, size_op));
    sends.push_back(cur_.comm->send_start(pr.rank, staging_.data(), staging_.size(), image_op));
  }
  ActivityBoard::WaitScope waiting(watch_.board());
  for (auto& w : sends) w->wait();
}

// Where a receiver's step 6 goes (its audit line; recovery_bench prints them): the staging
// wait, the size (sent once the source's image is written, so this wait is the source's
// serialisation), the image itself, then R6's validation and the copy in. restore_verified
// leaves the digest memo set (no pass after the swap).
void Recovery::receive_image(int source, int64_t redo, double staging_wait_ms) {
  const elastic::Plan& plan = cur_.plan;
  TimePoint tp = Clock::now();
  uint64_t size = 0;
  {
    ActivityBoard::WaitScope waiting(watch_.board());
    cur_.comm->recv(source, &size, sizeof size, OpPlan::transfer_size(static_cast<uint64_t>(redo)));
  }
  if (size > (uint64_t{1} << 40)) throw InvalidInput(str("state image of ", size, " bytes announced"));
  const double size_ms = ms_since(tp);
  // The staging buffer of R6, pre-touched at start (start_staging_pretouch): grown only if
  // this image is larger, never shrunk (a shrink then a grow would zero-fill again).
  if (size > staging_.size()) staging_.resize(size);
  tp = Clock::now();
  {
    ActivityBoard::WaitScope waiting(watch_.board());
    cur_.comm->recv(source, staging_.data(), size, OpPlan::transfer_image(static_cast<uint64_t>(redo)));
  }
  const double image_ms = ms_since(tp);
  tp = Clock::now();
  state_.restore_verified({staging_.data(), size}, plan.target_step, plan.target_digest,
                          str("state image from rank ", source, " (generation ", plan.generation, ")"));
  const double restore_ms = ms_since(tp);
  audit_->record("transfer", plan.generation, state_.step(), state_.current_digest(), cur_.rank, cur_.world,
                 {{"source", source}, {"staging_wait_ms", staging_wait_ms}, {"size_wait_ms", size_ms},
                  {"image_ms", image_ms}, {"restore_ms", restore_ms}});
}

void Recovery::verify(uint64_t tag_step, const char* when) {
  // (step, digest) of every rank: 1 + kDigestWords words each.
  constexpr size_t kWords = 1 + kDigestWords;
  const int world = cur_.world;
  const std::string mine = state_.current_digest();
  std::vector<uint64_t> in(kWords), out(kWords * static_cast<size_t>(world));
  in[0] = static_cast<uint64_t>(state_.step());
  digest_words(mine, in.data() + 1);
  {
    ActivityBoard::WaitScope waiting(watch_.board());
    cur_.comm->allgather({in.data(), in.size(), comm::DType::u64}, {out.data(), out.size(), comm::DType::u64},
                       OpPlan::verify(tag_step));
  }
  std::string bad;
  for (int r = 0; r < world; ++r) {
    const uint64_t* w = out.data() + kWords * r;
    const std::string d = words_digest(w + 1);
    bool same = false;
    try {
      same = same_digest(d, mine, str(when, ", generation ", cur_.plan.generation, ": rank ", r, " against ", cur_.rank));
    } catch (const DigestVersionError& e) {
      tell_fatal(e.what());
      throw;
    }
    if (!same || w[0] != in[0]) bad += str(" rank ", r, " has step ", static_cast<int64_t>(w[0]), " digest ", d, ";");
  }
  if (!bad.empty())
    throw DivergenceError(str("replicas diverged (", when, ", generation ", cur_.plan.generation, "): rank ", cur_.rank,
                              " has step ", state_.step(), " digest ", mine, ";", bad));
}

void Recovery::tell_fatal(const std::string& error) {
  if (!control_) return;
  try {
    ActivityBoard::IdleScope talking(watch_.board());
    control_->fatal(error);
  } catch (const Error& fe) {
    log::warn("recovery", "could not tell the coordinator: ", fe.what());
  }
}

// ---- step 8 ---------------------------------------------------------------------------

WorkerEvent Recovery::resume() {
  enter(RecoveryPhase::Resume);
  elastic::ReadyQuery rq;
  try {
    rq = control_->ready(cur_.plan.generation, cfg_.ready_timeout);
  } catch (const elastic::Refused&) {
    if (control_->fenced()) return {WorkerEventKind::Revoked};  // the leader was lost (see form())
    throw;
  }
  if (rq.kind == elastic::ReadyQuery::Stopped) throw elastic::JobStopped(str("the coordinator stopped the job: ", rq.error));
  if (rq.kind == elastic::ReadyQuery::Done) return {WorkerEventKind::JobFinished};
  if (rq.kind != elastic::ReadyQuery::Running) return {WorkerEventKind::Revoked};
  enter(std::nullopt);  // back to training at T+1
  return {WorkerEventKind::Running};
}

// ---- the staging buffer of step 6 ------------------------------------------------------

// It is as large as the state image (parameters + optimizer buffers: 800 MB for 100M
// parameters with momentum). Faulting it in during a transfer would cost ~13 us per 4 KiB
// page here (2.6 s for 800 MB), so it is faulted in once, ahead of need — on a thread of its
// own started right after join(), so a replacement reports at once and its page faults
// overlap the round, the connect and the source's serialisation instead of delaying all of
// them (await_staging() before step 6 and before training). Only the pages are wanted: a
// zero fill of the image's size, not an image (no digest, no CRCs). The slack covers the
// header's few varying digits (step, generation); the buffer is never shrunk, so it stays
// resident. (TrainState::prepare_staging: the pages made resident by one madvise, then the
// fill.)
void Recovery::start_staging_pretouch() {
  staging_thread_ = std::thread([this] { state_.prepare_staging(staging_); });
}

void Recovery::await_staging() {
  if (staging_thread_.joinable()) staging_thread_.join();
}

}  // namespace rf::ddp
