#include "ddp/fault_injector.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace rf::ddp {

using elastic::FaultKind;
using elastic::FaultPhase;

FaultInjector::FaultInjector(std::vector<elastic::FaultSpec> specs, int64_t incarnation, int slot)
    : incarnation_(incarnation), slot_(slot) {
  for (auto& s : specs)
    if (!s.launcher_side()) specs_.push_back(std::move(s));
  fired_ = std::vector<std::atomic<bool>>(specs_.size());
}

std::unique_ptr<FaultInjector> FaultInjector::from_env(int64_t incarnation, int slot) {
  const char* env = std::getenv("RINGFENCE_INJECT");
  return std::make_unique<FaultInjector>(elastic::parse_fault_specs(env ? env : ""), incarnation, slot);
}

void FaultInjector::on_plan(int64_t redo, bool fresh) {
  prev_max_redo_.store(max_redo_.load());
  if (!fresh && redo > max_redo_.load()) max_redo_.store(redo);
}

bool FaultInjector::eligible(FaultPhase phase, int64_t step) const {
  if (phase == FaultPhase::Transfer || phase == FaultPhase::Recovery) return step > prev_max_redo_.load();
  return step > max_redo_.load();
}

void FaultInjector::at(FaultPhase phase, int64_t step) {
  if (incarnation_ != 0) return;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& f = specs_[i];
    const FaultPhase p = f.phase.value_or(FaultPhase::Forward);
    if (p != phase || f.step != step || f.rank != rank_.load() || !eligible(p, step)) continue;
    if (p == FaultPhase::Allreduce && f.after_chunks.value_or(0) > 0) continue;  // on_chunk's
    fire(i, elastic::to_string(phase));
  }
}

void FaultInjector::on_chunk(uint64_t step, uint64_t chunks_done) {
  if (incarnation_ != 0) return;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& f = specs_[i];
    if (f.phase != FaultPhase::Allreduce || f.after_chunks.value_or(0) <= 0) continue;
    if (static_cast<int64_t>(step) != f.step || f.rank != rank_.load()) continue;
    if (static_cast<int64_t>(chunks_done) < *f.after_chunks || !eligible(FaultPhase::Allreduce, *f.step)) continue;
    fire(i, "allreduce");
  }
}

void FaultInjector::fire(size_t i, const char* where) {
  if (fired_[i].exchange(true)) return;
  const auto& f = specs_[i];
  std::fprintf(stderr, "ringfence worker slot %d rank %d: inject %s (at %s)\n", slot_, rank_.load(),
               f.to_string().c_str(), where);
  std::fflush(stderr);
  if (before_fire_) before_fire_(f, *f.step);
  switch (f.kind) {
    case FaultKind::Kill: ::raise(SIGKILL); break;
    case FaultKind::Stop: ::raise(SIGSTOP); break;
    case FaultKind::Exit: ::_exit(3);
    case FaultKind::Hang:
      while (true) ::poll(nullptr, 0, 1 << 20);  // blocks this thread for good
    case FaultKind::Drop:
      if (drop_) drop_();
      break;
    case FaultKind::Slow: ::poll(nullptr, 0, slow_ms_); break;
  }
}

}  // namespace rf::ddp
