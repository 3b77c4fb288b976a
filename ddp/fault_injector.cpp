#include "ddp/fault_injector.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "base/str.h"

namespace rf::ddp {
namespace {

std::mutex g_gpu_hang_mu;
std::function<void()> g_gpu_hang;  // set_gpu_hang_action's

}  // namespace

void set_gpu_hang_action(std::function<void()> action) {
  std::lock_guard<std::mutex> lk(g_gpu_hang_mu);
  g_gpu_hang = std::move(action);
}

using elastic::FaultKind;
using elastic::FaultPhase;

std::chrono::nanoseconds slow_delay(const elastic::FaultSpec& slow, std::span<const std::chrono::nanoseconds> recent,
                                    std::chrono::nanoseconds fixed) {
  if (!slow.factor || recent.empty()) return fixed;
  std::vector<std::chrono::nanoseconds> v(recent.begin(), recent.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 ? static_cast<double>(v[n / 2].count())
                              : (static_cast<double>(v[n / 2 - 1].count()) + static_cast<double>(v[n / 2].count())) / 2;
  return std::chrono::nanoseconds(static_cast<int64_t>((*slow.factor - 1) * median));
}

FaultInjector::FaultInjector(std::vector<elastic::FaultSpec> specs, int64_t incarnation, int slot)
    : incarnation_(incarnation), slot_(slot) {
  for (auto& s : specs)
    if (!s.launcher_side()) specs_.push_back(std::move(s));
  fired_ = std::vector<std::atomic<bool>>(specs_.size());
  last_slowed_ = std::vector<std::atomic<int64_t>>(specs_.size());
  disk_writes_.assign(specs_.size(), 0);
  for (auto& x : last_slowed_) x.store(-1);
  for (const auto& f : specs_) measures_steps_ = measures_steps_ || (incarnation_ == 0 && f.factor.has_value());
}

void FaultInjector::on_plan(int64_t redo, bool fresh) {
  prev_max_redo_.store(max_redo_.load());
  if (!fresh && redo > max_redo_.load()) max_redo_.store(redo);
  std::lock_guard<std::mutex> lk(mu_);
  injected_ = std::chrono::nanoseconds(0);  // the step that was delayed was not applied
  injected_step_ = -1;
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
    if (f.kind == FaultKind::Disk || p != phase || f.rank != rank_.load()) continue;  // (disk: storage_fault's)
    if (p == FaultPhase::Allreduce && f.after_chunks.value_or(0) > 0) continue;  // on_chunk's
    if (f.kind == FaultKind::Slow) {
      if (slows(f, step)) slow_step(i, step, elastic::to_string(phase));
      continue;
    }
    if (f.step == step && eligible(p, step)) fire(i, elastic::to_string(phase));
  }
}

ckpt::StorageFault FaultInjector::storage_fault(int64_t step) {
  ckpt::StorageFault out;
  if (incarnation_ != 0) return out;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& f = specs_[i];
    if (f.kind != FaultKind::Disk || f.rank != rank_.load() || step < *f.step) continue;
    if (disk_writes_[i] >= f.writes.value_or(1)) continue;
    if (disk_writes_[i]++ == 0) {
      fired_[i].store(true);
      announce(i, step, "checkpoint");
    }
    if (f.error && !out.err) out.err = *f.error;
    if (f.delay_s) out.delay += std::chrono::milliseconds(static_cast<int64_t>(*f.delay_s * 1000));
  }
  return out;
}

bool FaultInjector::slows(const elastic::FaultSpec& f, int64_t step) const {
  return step >= *f.step && step - *f.step < f.steps.value_or(1);
}

void FaultInjector::on_chunk(uint64_t step, uint64_t chunks_done) {
  if (incarnation_ != 0) return;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const auto& f = specs_[i];
    if (f.phase != FaultPhase::Allreduce || f.after_chunks.value_or(0) <= 0) continue;
    if (f.rank != rank_.load() || static_cast<int64_t>(chunks_done) < *f.after_chunks) continue;
    const auto s = static_cast<int64_t>(step);
    if (f.kind == FaultKind::Slow) {
      if (slows(f, s)) slow_step(i, s, "allreduce");
      continue;
    }
    if (s == f.step && eligible(FaultPhase::Allreduce, s)) fire(i, "allreduce");
  }
}

void FaultInjector::slow_step(size_t i, int64_t step, const char* where) {
  // Claim the step: the chunk hook calls once per chunk, and a redone step was delayed.
  int64_t prev = last_slowed_[i].load();
  do {
    if (prev >= step) return;
  } while (!last_slowed_[i].compare_exchange_weak(prev, step));
  if (!fired_[i].exchange(true)) announce(i, step, where);  // once per spec, at its first delayed step
  std::chrono::nanoseconds d;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const std::vector<std::chrono::nanoseconds> recent(recent_.begin(), recent_.end());
    d = slow_delay(specs_[i], recent, slow_ms_);
    // A recovery's delays (phase transfer or recovery) come before the redone step starts.
    const FaultPhase p = specs_[i].phase.value_or(FaultPhase::Forward);
    if (p != FaultPhase::Transfer && p != FaultPhase::Recovery) {
      if (injected_step_ != step) injected_ = std::chrono::nanoseconds(0);
      injected_step_ = step;
      injected_ += d;
    }
  }
  if (sleep_)
    sleep_(d);
  else
    std::this_thread::sleep_for(d);
}

void FaultInjector::step_took(int64_t step, std::chrono::nanoseconds d) {
  if (!measures_steps_) return;  // no lock in a step of a job without a factor= spec
  std::lock_guard<std::mutex> lk(mu_);
  // Only this step's own delays count: a failed step's were never part of a step time.
  const bool slowed = injected_step_ == step;
  if (slowed) d -= injected_;
  injected_ = std::chrono::nanoseconds(0);
  injected_step_ = -1;
  // A slowed step's time, even without its delay, is no measure of the rank's usual step:
  // its peers wait for it instead of it for them, and it gets more of the cores, so its net
  // time shrinks and the next delay would shrink with it (a factor of 5 gave 1.1-3.2x on a
  // loaded 2-core machine). It counts only while nothing else is known (a range from step 0).
  if (slowed && !recent_.empty()) return;
  recent_.push_back(std::max(d, std::chrono::nanoseconds(0)));
  if (recent_.size() > kStepWindow) recent_.pop_front();
}

namespace {

// Only async-signal-safe calls (the child of a threaded process): whether `pid` is stopped.
bool process_stopped(const char* stat_path) {
  const int fd = ::open(stat_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // gone: nothing to wait for
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')' (comm may hold one).
  const char* close_paren = nullptr;
  for (const char* p = buf; *p; ++p)
    if (*p == ')') close_paren = p;
  return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'T' || close_paren[2] == 't');
}

void sleep_ns(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (::nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

// stop with for=: the whole process freezes, every thread at once (as a VM its host pauses,
// or a debugger), and a helper child continues it `seconds` after it stopped. The child
// first waits (at most 10 s) until the process is stopped, so a short freeze cannot send
// SIGCONT before the SIGSTOP; it is reaped here once the process goes on.
void freeze_for(double seconds) {
  const pid_t self = ::getpid();
  char stat_path[64];
  std::snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", static_cast<int>(self));
  const pid_t child = ::fork();
  if (child < 0) throw rf::Error(rf::str("--inject stop with for=: fork failed: ", std::strerror(errno)));
  if (child == 0) {
    for (int i = 0; i < 10'000 && !process_stopped(stat_path); ++i) sleep_ns(1'000'000);
    sleep_ns(static_cast<int64_t>(seconds * 1e9));
    ::kill(self, SIGCONT);
    ::_exit(0);
  }
  ::raise(SIGSTOP);
  while (::waitpid(child, nullptr, 0) == -1 && errno == EINTR) {
  }
}

}  // namespace

void FaultInjector::announce(size_t i, int64_t step, const char* where) {
  const auto& f = specs_[i];
  log::warn("inject", f.to_string(), " (at ", where, ")");
  if (before_fire_) before_fire_(f, step);
}

void FaultInjector::fire(size_t i, const char* where) {
  if (fired_[i].exchange(true)) return;
  const auto& f = specs_[i];
  announce(i, *f.step, where);
  const bool to_process = f.kind == FaultKind::Kill || f.kind == FaultKind::Stop || f.kind == FaultKind::Exit ||
                          f.kind == FaultKind::Hang;
  if (to_process && process_fault_) {
    process_fault_(f);
    return;
  }
  switch (f.kind) {
    case FaultKind::Kill: ::raise(SIGKILL); break;
    case FaultKind::Stop:
      if (f.for_s) freeze_for(*f.for_s);
      else ::raise(SIGSTOP);
      break;
    case FaultKind::Exit: ::_exit(3);
    case FaultKind::Hang:
      while (true) ::poll(nullptr, 0, 1 << 20);  // blocks this thread for good
    case FaultKind::Drop:
      if (drop_) drop_();
      break;
    case FaultKind::Slow: break;  // slow_step's: it may delay many steps
    case FaultKind::Disk: break;  // storage_fault's: it strikes checkpoint writes
    case FaultKind::GpuHang: {
      std::function<void()> hang;
      {
        std::lock_guard<std::mutex> lk(g_gpu_hang_mu);
        hang = g_gpu_hang;
      }
      if (!hang)
        throw rf::InvalidInput(rf::str("--inject ", f.to_string(), ": this process has no GPU stream to make stuck "
                                       "(it computes on the CPU, or never installed a gpu_hang action)"));
      hang();  // returns at once: the kernel it enqueued runs until the process exits
      break;
    }
  }
}

}  // namespace rf::ddp
