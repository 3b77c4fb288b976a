// memory_probe — the kernel-side costs around a replacement's start-up, each measured
// against its alternative in the same run (bench/RESULTS.md, the replacement's start-up and
// mapping a peer's buffer).
//
//   memory_probe stall [MB]     one thread makes a fresh memfd of MB (400) resident — by
//                               MAP_POPULATE (one call) or rf::populate_pages (16 MiB calls),
//                               alternated — while another thread loops mmap + touch + munmap
//                               of 256 KiB: its longest iteration is how long a heartbeat
//                               thread allocating then would have waited.
//   memory_probe peer [MB]      the same for mapping a peer's buffer read-only (comm's
//                               map_remote_fd): a resident memfd of MB (400), opened again by
//                               /proc/self/fd and mapped PROT_READ with MAP_POPULATE, or
//                               populated by rf::populate_pages_read (16 MiB calls),
//                               alternated, alone and with the other thread; also the calling
//                               thread's longest single call.
//   memory_probe teardown [MB]  a child holding MB (1600) of touched private memory plus a
//                               400 MB memfd is SIGKILLed, running or SIGSTOPped first
//                               (alternated): SIGKILL -> waitpid returns.
//   memory_probe overlap        (no MB: refused) a SIGSTOPped 1600 + 400 MB child is SIGKILLed and a
//                               "replacement" child makes 1200 MB resident: forked after the
//                               reap (the launcher today) or right after the kill, alternated.
// Each mode runs --rounds N (3) rounds; one line per measurement. MB may also be given as
// --mb MB. Flags: bench/flags.h (--help; a bad value is a usage error, exit 2).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "base/populate.h"
#include "bench/flags.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
constexpr size_t kMB = size_t{1} << 20;

void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

// A fresh memfd of `bytes`, mapped shared; made resident by MAP_POPULATE or by slices.
void* memfd_map(size_t bytes, bool map_populate) {
  const int fd = memfd_create("memory_probe", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) die("memfd");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (map_populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) die("mmap");
  close(fd);
  if (!map_populate) rf::populate_pages(p, bytes);
  return p;
}

// While alive, another thread loops mmap + touch + munmap of 256 KiB, as a heartbeat
// thread allocating would; worst() is its longest iteration.
class OtherThread {
 public:
  OtherThread()
      : t_([this] {
          while (!stop_.load()) {
            const auto t = Clock::now();
            void* p = mmap(nullptr, 256 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) die("mmap");
            static_cast<volatile char*>(p)[0] = 1;
            munmap(p, 256 << 10);
            worst_ = std::max(worst_, ms_since(t));
            ++iters_;
            started_.store(true);
          }
        }) {
    while (!started_.load()) std::this_thread::yield();  // it is looping
  }
  // Stops it; then worst() and iterations() are final.
  void stop() {
    stop_.store(true);
    if (t_.joinable()) t_.join();
  }
  ~OtherThread() { stop(); }
  double worst() const { return worst_; }
  long iterations() const { return iters_; }

 private:
  std::atomic<bool> stop_{false}, started_{false};
  double worst_ = 0;
  long iters_ = 0;
  std::thread t_;
};

void stall(size_t mb, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (const bool map_populate : {true, false}) {
      OtherThread other;
      const auto t = Clock::now();
      void* p = memfd_map(mb * kMB, map_populate);
      const double took = ms_since(t);
      other.stop();
      munmap(p, mb * kMB);
      std::printf("stall    %-13s %zu MB memfd resident in %7.1f ms; the other thread's longest mmap+touch+munmap "
                  "%7.1f ms (%ld iterations)\n",
                  map_populate ? "MAP_POPULATE" : "populate_pages", mb, took, other.worst(), other.iterations());
    }
  }
}

// The longest madvise call populate_pages_read made (it calls this for each slice).
double g_longest_call_ms = 0;
int timed_madvise(void* addr, size_t len, int advice) {
  const auto t = Clock::now();
  const int rc = ::madvise(addr, len, advice);
  g_longest_call_ms = std::max(g_longest_call_ms, ms_since(t));
  return rc;
}

// A peer's buffer as comm maps it (comm/shm/shm_mappings.cpp map_remote_fd): its owner made
// the memfd resident; the mapper opens /proc/<pid>/fd/<fd> and maps it read-only.
void peer(size_t mb, int rounds) {
  const size_t bytes = mb * kMB;
  const int fd = memfd_create("memory_probe", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) die("memfd");
  void* owner = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (owner == MAP_FAILED) die("mmap");
  rf::populate_pages(owner, bytes);
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  for (int r = 0; r < rounds; ++r) {
    for (const bool alone : {true, false}) {
      for (const bool map_populate : {true, false}) {
        const int local = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (local < 0) die("open");
        std::optional<OtherThread> other;
        if (!alone) other.emplace();
        g_longest_call_ms = 0;
        const auto t = Clock::now();
        void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED | (map_populate ? MAP_POPULATE : 0), local, 0);
        if (p == MAP_FAILED) die("mmap");
        const double mmap_ms = ms_since(t);
        rf::PopulateStats st;
        if (!map_populate) st = rf::populate_pages_read(p, bytes, rf::kPopulateSliceBytes, timed_madvise);
        const double total = ms_since(t);
        if (st.fallback_bytes != 0) std::fprintf(stderr, "memory_probe: MADV_POPULATE_READ failed: pages were read\n");
        if (other) other->stop();
        close(local);
        munmap(p, bytes);
        std::printf("peer     %-19s %zu MB mapped in %7.1f ms, %3zu calls, longest %7.1f ms",
                    map_populate ? "MAP_POPULATE" : "populate_pages_read", mb, total, st.calls + 1,
                    std::max(mmap_ms, g_longest_call_ms));
        if (other)
          std::printf("; the other thread's longest mmap+touch+munmap %7.1f ms (%ld iterations)\n", other->worst(),
                      other->iterations());
        else
          std::printf("; alone\n");
      }
    }
  }
  munmap(owner, bytes);
  close(fd);
}

// A child holding `priv_mb` of touched private memory and a 400 MB memfd, SIGSTOPped if
// asked; returns when it is ready.
pid_t holder(size_t priv_mb, bool stopped) {
  int pfd[2];
  if (pipe(pfd) != 0) die("pipe");
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    void* p = mmap(nullptr, priv_mb * kMB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(2);
    rf::populate_pages(p, priv_mb * kMB);
    std::memset(p, 1, priv_mb * kMB);
    memfd_map(400 * kMB, false);
    if (write(pfd[1], "x", 1) != 1) _exit(2);
    for (;;) pause();
  }
  char c;
  if (read(pfd[0], &c, 1) != 1) die("holder");
  close(pfd[0]);
  close(pfd[1]);
  if (stopped) {
    kill(pid, SIGSTOP);
    int st;
    if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) die("SIGSTOP");
  }
  return pid;
}

void reap(pid_t pid) {
  int st;
  if (waitpid(pid, &st, 0) != pid) die("waitpid");
}

void teardown(size_t mb, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (const bool stopped : {true, false}) {
      const pid_t pid = holder(mb, stopped);
      const auto t = Clock::now();
      kill(pid, SIGKILL);
      reap(pid);
      std::printf("teardown %-8s %zu MB private + 400 MB memfd: SIGKILL -> reaped %7.1f ms\n",
                  stopped ? "stopped" : "running", mb, ms_since(t));
    }
  }
}

pid_t replacement() {
  const pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    void* p = mmap(nullptr, 1200 * kMB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(2);
    rf::populate_pages(p, 1200 * kMB);
    _exit(0);
  }
  return pid;
}

void overlap(int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (const bool at_kill : {false, true}) {
      const pid_t old = holder(1600, true);
      const auto t = Clock::now();
      kill(old, SIGKILL);
      double reaped = 0, ready = 0;
      if (!at_kill) {
        reap(old);
        reaped = ms_since(t);
        reap(replacement());
        ready = ms_since(t);
      } else {
        reap(replacement());
        ready = ms_since(t);
        reap(old);
        reaped = ms_since(t);
      }
      std::printf("overlap  replacement forked %-15s SIGKILL -> old reaped %7.1f ms, -> replacement's 1200 MB "
                  "resident %7.1f ms\n",
                  at_kill ? "at the kill:" : "after the reap:", reaped, ready);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 0;
  int rounds = 3;
  rf::bench::Flags flags("memory_probe", "memory_probe stall|peer|teardown|overlap [MB] [flags]   (MB: see the modes "
                                         "in memory_probe.cpp; default 400, teardown 1600)");
  flags.integer("--mb", "the memory size in MB, as the positional MB (default: the mode's)", mb, 1, 1 << 20)
      .integer("--rounds", "rounds, each alternative once per round (default 3)", rounds, 1);
  // MODE [MB] first, then the flags (argv[k - 1] stands for the program name).
  int k = 1;
  std::string mode;
  if (argc > 1 && argv[1][0] != '-') mode = argv[k++];
  try {
    if (!mode.empty() && argc > k && argv[k][0] != '-')
      mb = static_cast<size_t>(rf::bench::parse_int_flag("MB", argv[k++], 1, 1 << 20));
  } catch (const rf::bench::UsageError& e) {
    return flags.fail(e.what());
  }
  if (const int rc = flags.parse_or_exit_code(argc - k + 1, argv + k - 1); rc >= 0) return rc;
  if (mode == "stall") stall(mb ? mb : 400, rounds);
  else if (mode == "peer") peer(mb ? mb : 400, rounds);
  else if (mode == "teardown") teardown(mb ? mb : 1600, rounds);
  else if (mode == "overlap" && mb) return flags.fail("overlap takes no MB: its sizes are fixed (1600 + 400, 1200)");
  else if (mode == "overlap") overlap(rounds);
  else if (mode.empty()) return flags.fail("no mode given (stall, peer, teardown or overlap)");
  else return flags.fail("unknown mode '" + mode + "' (stall, peer, teardown or overlap)");
  return 0;
}
