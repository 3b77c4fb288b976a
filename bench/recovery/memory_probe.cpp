// memory_probe — the kernel-side costs around a replacement's start-up, each measured
// against its alternative in the same run (bench/RESULTS.md "Replacement start-up, session 4").
//
//   memory_probe stall [MB]     one thread makes a fresh memfd of MB (400) resident — by
//                               MAP_POPULATE (one call) or rf::populate_pages (16 MiB calls),
//                               alternated — while another thread loops mmap + touch + munmap
//                               of 256 KiB: its longest iteration is how long a heartbeat
//                               thread allocating then would have waited.
//   memory_probe teardown [MB]  a child holding MB (1600) of touched private memory plus a
//                               400 MB memfd is SIGKILLed, running or SIGSTOPped first
//                               (alternated): SIGKILL -> waitpid returns.
//   memory_probe overlap        a SIGSTOPped 1600 + 400 MB child is SIGKILLed and a
//                               "replacement" child makes 1200 MB resident: forked after the
//                               reap (the launcher today) or right after the kill, alternated.
// Each mode runs --rounds N (3) rounds; one line per measurement.
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
#include <string>
#include <thread>

#include "base/populate.h"

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

void stall(size_t mb, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (const bool map_populate : {true, false}) {
      std::atomic<bool> stop{false}, started{false};
      double worst = 0;
      long iters = 0;
      std::thread other([&] {
        while (!stop.load()) {
          const auto t = Clock::now();
          void* p = mmap(nullptr, 256 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          if (p == MAP_FAILED) die("mmap");
          static_cast<volatile char*>(p)[0] = 1;
          munmap(p, 256 << 10);
          worst = std::max(worst, ms_since(t));
          ++iters;
          started.store(true);
        }
      });
      while (!started.load()) std::this_thread::yield();  // the other thread is looping
      const auto t = Clock::now();
      void* p = memfd_map(mb * kMB, map_populate);
      const double took = ms_since(t);
      stop.store(true);
      other.join();
      munmap(p, mb * kMB);
      std::printf("stall    %-13s %zu MB memfd resident in %7.1f ms; the other thread's longest mmap+touch+munmap "
                  "%7.1f ms (%ld iterations)\n",
                  map_populate ? "MAP_POPULATE" : "populate_pages", mb, took, worst, iters);
    }
  }
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
  if (argc < 2) {
    std::fprintf(stderr, "usage: memory_probe stall|teardown|overlap [MB] [--rounds N]\n");
    return 1;
  }
  const std::string mode = argv[1];
  size_t mb = 0;
  int rounds = 3;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else mb = std::strtoull(argv[i], nullptr, 10);
  }
  if (rounds < 1) {
    std::fprintf(stderr, "memory_probe: --rounds must be at least 1\n");
    return 1;
  }
  if (mode == "stall") stall(mb ? mb : 400, rounds);
  else if (mode == "teardown") teardown(mb ? mb : 1600, rounds);
  else if (mode == "overlap") overlap(rounds);
  else {
    std::fprintf(stderr, "memory_probe: unknown mode '%s' (stall, teardown, overlap)\n", mode.c_str());
    return 1;
  }
  return 0;
}
