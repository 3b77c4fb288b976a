// The NCCL backend: forming a generation's communicator (fresh init, or ncclCommShrink when
// the coordinator's plan says so), and tearing one down within a bound. The class is in
// nccl_impl.h; the wait loop and revocation in nccl_communicator.cpp.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <unistd.h>

#include "base/log.h"
#include "comm/nccl/determinism.h"
#include "comm/nccl/nccl_impl.h"
#include "comm/nccl/regroup.h"
#include "comm/nccl/runtime_connect.h"
#include "comm/nccl/unique_id.h"
#include "comm/nccl/version.h"

namespace rf::comm::nccl {

namespace {

CommErrorInfo bootstrap_info(int rank, uint64_t generation, std::string cause) {
  return CommErrorInfo{rank, "bootstrap", static_cast<int64_t>(generation), -1, -1, -1, -1, std::move(cause)};
}

// Deterministic mode's environment (determinism.h), applied once per process before its
// first communicator: NCCL reads these when it makes one.
void apply_determinism(bool deterministic) {
  static std::once_flag once;
  static bool applied = false;
  std::call_once(once, [&] {
    applied = deterministic;
    const auto choices = determinism_env(deterministic, [](const char* n) { return std::getenv(n); });
    for (const EnvChoice& c : choices)
      if (!c.kept) setenv(c.name.c_str(), c.value.c_str(), 1);
    rf::log::info("nccl", describe_determinism(deterministic, choices));
    const auto risks = order_risks(deterministic, [](const char* n) { return std::getenv(n); },
                                   [](const std::string& path) { return ::access(path.c_str(), F_OK) == 0; });
    for (const OrderRisk& r : risks) rf::log::warn("nccl", describe_order_risk(r));
  });
  if (applied != deterministic)
    rf::log::warn("nccl", "stays ", applied ? "deterministic" : "not deterministic",
                  " in this process (the first communicator's setting; NCCL read it then)");
}

// NCCL_RUNTIME_CONNECT=0 where the user has not set it (runtime_connect.h), once per process
// before its first communicator: NCCL reads it when it makes one.
void apply_runtime_connect() {
  static std::once_flag once;
  std::call_once(once, [] {
    const EnvChoice c = runtime_connect_env([](const char* n) { return std::getenv(n); });
    if (!c.kept) setenv(c.name.c_str(), c.value.c_str(), 1);
    rf::log::info("nccl", describe_runtime_connect(c));
  });
}

}  // namespace

void detail::abort_bounded(ncclComm_t comm, int device, const std::string& what, std::function<void()> after,
                           Duration bound) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    double abort_ms = 0;  // how long ncclCommAbort itself took
  };
  auto st = std::make_shared<State>();
  std::thread([st, comm, device, after = std::move(after)] {
    bind_device(device);
    const TimePoint t0 = Clock::now();
    if (comm) ncclCommAbort(comm);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (after) after();
    std::lock_guard lk(st->mu);
    st->done = true;
    st->abort_ms = ms;
    st->cv.notify_all();
  }).detach();
  std::unique_lock lk(st->mu);
  if (st->cv.wait_for(lk, bound, [&] { return st->done; })) {
    // A healthy abort joins NCCL's proxy threads, which poll every 500 ms: measured, so a
    // slow teardown shows in the log before it reaches the bound.
    if (comm) rf::log::info("nccl", what, " on cuda:", device, ": ncclCommAbort took ", std::lround(st->abort_ms), " ms");
    return;
  }
  rf::log::error("nccl", what, " on cuda:", device, ": ncclCommAbort has not returned after ",
                 std::chrono::duration<double>(bound).count(),
                 " s (NCCL waits for a kernel on this GPU that does not end); this worker exits with status ",
                 kExitTeardownStuck, " so that its launcher restarts it");
  std::fflush(stderr);
  std::_Exit(kExitTeardownStuck);
}

NcclCommunicator::NcclCommunicator(const CommOptions& o, NcclCommunicator* previous)
    : rank_(o.rank), world_(o.world), generation_(o.generation), device_(o.device_index), members_(o.members),
      on_chunk_(o.on_chunk), recorder_path_(o.flight_recorder_path), recorder_(256, o.rank),
      stall_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(o.stall_timeout).count()) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
    throw rf::InvalidInput(rf::str("NCCL backend: rank ", o.rank, " of world ", o.world));
  bind_device(device_);
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); e != cudaSuccess)
    throw rf::Error(rf::str("NCCL backend g=", generation_, " rank ", rank_, " cuda:", device_,
                            ": cudaStreamCreateWithFlags: ", cuda_text(e)));
  try {
    form(o, previous);
  } catch (...) {
    cudaStreamDestroy(stream_);  // no destructor runs for a constructor that throws
    throw;
  }
}

void NcclCommunicator::form(const CommOptions& o, NcclCommunicator* previous) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  // A child never shares the parent's resources: the parent is torn down after the shrink,
  // and an abort of a sharing parent would stop the child's kernels too.
  cfg.splitShare = 0;
  cfg.shrinkShare = 0;
  if (o.nccl_deterministic) {
    cfg.minCTAs = cfg.maxCTAs = kDeterministicChannels;
    cfg.collnetEnable = 0;
  }
  if (o.regroup.kind == CommRegroup::Kind::shrink) {
    if (previous == nullptr)
      throw PeerFailed(bootstrap_info(rank_, generation_,
                                      rf::str("the plan says shrink g=", o.regroup.from_generation,
                                              ", but this rank holds no NCCL communicator")));
#if RF_NCCL_HAS_SHRINK
    form_shrink(o, cfg, *previous);
    return;
#else
    throw PeerFailed(bootstrap_info(rank_, generation_, "the plan says shrink, but this NCCL has no ncclCommShrink"));
#endif
  }
  rf::log::info("nccl", "g=", generation_, " rank ", rank_, " cuda:", device_,
                ": fresh ncclCommInitRankConfig (the plan's choice",
                previous ? rf::str("; g=", previous->generation(), "'s communicator is torn down") : std::string(), ")");
  form_fresh(o, cfg);
}

void NcclCommunicator::form_shrink(const CommOptions& o, ncclConfig_t& cfg, NcclCommunicator& prev) {
#if RF_NCCL_HAS_SHRINK
  const uint64_t from = o.regroup.from_generation;
  auto refuse = [&](const std::string& why) {
    throw PeerFailed(bootstrap_info(rank_, generation_, rf::str("ncclCommShrink of g=", from, " on cuda:", device_, ": ", why)));
  };
  if (prev.generation() != from) refuse(rf::str("this rank holds g=", prev.generation(), "'s communicator"));
  if (o.members.empty() || prev.members().empty()) refuse("no member lists to map the ranks with");
  std::lock_guard lk(prev.loop_mu());
  if (prev.shrinkable() == nullptr) refuse("this rank's communicator of it is gone (aborted)");
  const RegroupPlan plan = plan_regroup(prev.members(), o.members, true);
  if (plan.kind != RegroupPlan::Kind::shrink) refuse(plan.reason);
  const int old_rank = prev.rank();
  if (old_rank < 0 || old_rank >= static_cast<int>(plan.new_rank.size()) || plan.new_rank[old_rank] != rank_)
    refuse(rf::str("it maps previous rank ", old_rank, " elsewhere than rank ", rank_));
  const TimePoint until = Clock::now() + o.connect_timeout;
  // A revoked communicator may be shrunk once it is quiescent (nccl.h), and only if it
  // settled without an error (nccl_impl.h, "Revocation").
  ncclComm_t parent = prev.regroupable(until);
  if (parent == nullptr && prev.shrinkable() != nullptr)
    throw TimedOut(bootstrap_info(rank_, generation_,
                                  rf::str("g=", from, "'s communicator on cuda:", device_,
                                          " is not quiescent after its revocation; cannot shrink it")));
  if (parent == nullptr) refuse(prev.unshrinkable_why());
  std::vector<int> excluded = plan.excluded;  // NCCL sorts it in place
  // Non-blocking: NCCL writes the child's handle only when the shrink's background job
  // ends (it reads NULL until then, init.cc) and reports progress on the PARENT. The handle
  // lives on the heap: if our bound passes first, NCCL may still write it later, so it is
  // then left to NCCL (8 bytes) rather than freed under it.
  auto* child = new ncclComm_t(nullptr);
  rf::log::info("nccl", "g=", generation_, " rank ", rank_, " cuda:", device_, ": ncclCommShrink of g=", from, " (",
                plan.reason, ")");
  ncclResult_t r = ncclCommShrink(parent, excluded.data(), static_cast<int>(excluded.size()), child, &cfg,
                                  NCCL_SHRINK_DEFAULT);
  if (r == ncclInProgress || r == ncclSuccess) r = settle(parent, until, false);
  ncclComm_t made = __atomic_load_n(child, __ATOMIC_ACQUIRE);
  if (r == ncclSuccess && made == nullptr) r = ncclInternalError;
  if (r == ncclSuccess) r = settle(made, until, false);
  if (r == ncclSuccess) {
    delete child;
    comm_ = made;
    rf::log::info("nccl", "g=", generation_, " rank ", rank_, " cuda:", device_, ": shrink formed from g=", from, " (",
                  world_, " ranks)");
    return;
  }
  const std::string text = nccl_text(parent, r);
  prev.broken_ = true;  // a failed or unfinished shrink leaves the parent only to abort
  if (r != ncclInProgress) {
    delete child;
    if (made) abort_bounded(made, device_, rf::str("g=", generation_, " (a failed shrink)"));
  }
  CommErrorInfo i = bootstrap_info(rank_, generation_, rf::str("ncclCommShrink of g=", from, " on cuda:", device_, ": ", text));
  if (r == ncclInProgress) {
    i.cause += rf::str(" after the connect timeout (", o.connect_timeout.count(), " ms)");
    throw TimedOut(i);
  }
  throw PeerFailed(i);
#else
  (void)o, (void)cfg, (void)prev;
#endif
}

void NcclCommunicator::form_fresh(const CommOptions& o, ncclConfig_t& cfg) {
  const UniqueId uid = exchange_unique_id(*o.store, generation_, rank_, world_, o.connect_timeout, [this] {
    ncclUniqueId id;
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      throw rf::Error(rf::str("NCCL backend g=", generation_, ": ncclGetUniqueId: ", nccl_text(nullptr, r)));
    return std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id);
  });
  ncclUniqueId id;
  static_assert(sizeof id == kUniqueIdBytes);
  std::memcpy(&id, uid.data(), sizeof id);
  ncclResult_t r = ncclCommInitRankConfig(&comm_, world_, id, rank_, &cfg);
  if (r == ncclInProgress || r == ncclSuccess) r = settle(comm_, Clock::now() + o.connect_timeout, true);
  if (r == ncclSuccess) return;
  const std::string text = r == ncclInProgress ? std::string("still in progress") : nccl_text(comm_, r);
  if (comm_) abort_bounded(comm_, device_, rf::str("g=", generation_, " (a failed init)"));
  comm_ = nullptr;
  CommErrorInfo i = bootstrap_info(rank_, generation_,
                                   rf::str("ncclCommInitRankConfig of ", world_, " ranks on cuda:", device_, ": ", text));
  if (r == ncclInProgress) {
    i.cause += rf::str(" after the connect timeout (", o.connect_timeout.count(), " ms)");
    throw TimedOut(i);
  }
  throw PeerFailed(i);
}

ncclComm_t NcclCommunicator::regroupable(TimePoint until) const {
  if (shrinkable() == nullptr) {
    if (unshrinkable_.empty()) unshrinkable_ = "this rank's communicator of it is gone (aborted)";
    return nullptr;
  }
  const ncclResult_t st = settle(comm_, until, false);
  if (st == ncclSuccess) return comm_;
  if (st == ncclInProgress) {
    unshrinkable_ = "it is not quiescent after its revocation";
    return nullptr;
  }
  broken_ = true;
  unshrinkable_ = rf::str("it settled with ", nccl_text(comm_, st),
                          " (NCCL keeps its proxy's error after a peer's death, through ncclCommRevoke; "
                          "ncclCommShrink would return it)");
  rf::log::info("nccl", "g=", generation_, " rank ", rank_, " cuda:", device_, ": not shrinkable: ", unshrinkable_,
                "; the next generation forms afresh");
  return nullptr;
}

ncclResult_t NcclCommunicator::settle(ncclComm_t comm, TimePoint until, bool abortable) const {
  for (;;) {
    ncclResult_t st = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &st); r != ncclSuccess) return r;
    if (st != ncclInProgress) return st;
    if (Clock::now() >= until || (abortable && abort_flag_.load(std::memory_order_acquire))) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard lk(loop_mu_);
    stop_ = true;
    (void)poll(nullptr, TimePoint::max());  // what has completed finishes normally
    if (!pending_.empty() && !poison_) {
      WaitDecision d;
      d.action = WaitAction::revoke;
      d.kind = ErrorKind::aborted;
      d.error = bootstrap_info(rank_, generation_, "communicator destroyed with operations pending");
      d.error.collective = "destroy";
      revoke(d);
    }
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // ncclCommAbort, not ncclCommFinalize: finalizing waits for peers, which may be dead; the
  // generation is over either way. It runs bounded (abort_bounded); then our stream and
  // events go (CUDA releases them once their work completes), and the staging slots under
  // revoked copies return to the pool when the stream gets past those copies (a host
  // function behind them): never while a copy may still write them, and never lost.
  std::vector<cudaEvent_t> events = std::move(free_events_);
  auto slots = std::make_unique<std::vector<StagingSlot>>(std::move(revoked_slots_));
  if (!slots->empty())
    rf::log::info("nccl", "g=", generation_, " cuda:", device_, ": ", slots->size(),
                  " staging slot(s) under revoked copies return to the pool once the stream gets past them");
  cudaStream_t stream = stream_;
  auto release = [stream, events, raw = slots.release()] {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    std::unique_ptr<std::vector<StagingSlot>> owned(raw);
    if (stream && !owned->empty()) {
      auto give_back = [](void* p) {
        std::unique_ptr<std::vector<StagingSlot>> s(static_cast<std::vector<StagingSlot>*>(p));
        for (const StagingSlot& slot : *s) release_staging(slot);
      };
      if (cudaLaunchHostFunc(stream, give_back, owned.get()) == cudaSuccess) owned.release();
    }
    if (stream) cudaStreamDestroy(stream);
  };
  // Behind a kernel of this GPU's that never ends the abort cannot return: no waiting long.
  const bool stuck = poison_ && poison_decision_.error.device_stuck;
  abort_bounded(comm_, device_, rf::str("g=", generation_, " rank ", rank_), release,
                stuck ? kStuckTeardownBound : kTeardownBound);
}

// ---- entry points --------------------------------------------------------------------

std::shared_ptr<Communicator> make_nccl_communicator(const CommOptions& o) {
  if (o.store == nullptr) throw rf::InvalidInput("NCCL backend: no bootstrap store (CommOptions::store is null)");
  if (o.device != Device::cuda) throw rf::InvalidInput("NCCL backend: CommOptions::device must be cuda");
  if (!o.members.empty() && static_cast<int>(o.members.size()) != o.world)
    throw rf::InvalidInput(rf::str("NCCL backend: ", o.members.size(), " members for world ", o.world));
  apply_determinism(o.nccl_deterministic);
  apply_runtime_connect();
  auto* previous = dynamic_cast<NcclCommunicator*>(o.previous.get());
  auto c = std::make_shared<NcclCommunicator>(o, previous);
  c->start_watchdog();
  return c;
}

void prepare_nccl() {
  static std::once_flag once;
  std::call_once(once, [] {
    int version = 0;
    if (ncclResult_t r = ncclGetVersion(&version); r != ncclSuccess)
      throw rf::Error(rf::str("NCCL backend: ncclGetVersion: ", nccl_text(nullptr, r)));
    // The Revoke/Shrink guards were decided from the header: an older library would fail
    // on a missing symbol in the middle of a recovery. Refused here, by name.
    if (const std::string why = nccl_library_refusal(version, NCCL_VERSION_CODE); !why.empty()) throw rf::Error(why);
    if (version != NCCL_VERSION_CODE)
      rf::log::warn("nccl", "the library ", nccl_version_text(version), " differs from the header's ",
                    nccl_version_text(NCCL_VERSION_CODE));
  });
}

}  // namespace rf::comm::nccl
