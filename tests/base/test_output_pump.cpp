// OutputPump (base/output_pump.h), in a child process: the pump takes over the process's
// stdout and stderr, which a test runner must keep.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "base/output_pump.h"
#include "base/output_queue.h"

namespace {
constexpr int kLines = 50000;  // ~1.5 MB: far more than a pipe holds

// Reads fd until `want` is in what was read (empty `want`: until end of file), or the
// deadline passes (then false).
bool read_until(int fd, std::string& got, const std::string& want, int deadline_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
  char buf[65536];
  while (want.empty() || got.find(want) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return want.empty() || got.find(want) != std::string::npos;
    got.append(buf, static_cast<size_t>(n));
  }
  return true;
}

// The child: stdout and stderr to `out`, the pump installed, kLines lines written, then
// "wrote" on `status` (no pump in front of it), then one more line, and exit 0.
[[noreturn]] void child(int out, int status) {
  ::dup2(out, STDOUT_FILENO);
  ::dup2(out, STDERR_FILENO);
  rf::OutputPump::install(256 * 1024);
  for (int i = 0; i < kLines; ++i) std::printf("line %06d of the child's output\n", i);
  std::fflush(stdout);
  (void)!::write(status, "wrote\n", 6);
  std::fprintf(stderr, "the last line\n");
  std::exit(0);
}

struct Child {
  pid_t pid = -1;
  int out = -1, status = -1;
  explicit Child(void (*body)(int, int) = child) {
    int o[2], s[2];
    std::fflush(stdout);  // or the child would write the parent's buffered output again
    std::fflush(stderr);
    REQUIRE(::pipe(o) == 0);
    REQUIRE(::pipe(s) == 0);
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(o[0]);
      ::close(s[0]);
      body(o[1], s[1]);
      std::exit(0);
    }
    ::close(o[1]);
    ::close(s[1]);
    out = o[0];
    status = s[0];
  }
  // Its exit status; SIGKILLed (and -1) if it has not ended within the deadline.
  int wait(int deadline_ms) {
    for (int waited = 0;; waited += 10) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (waited >= deadline_ms) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        return -1;
      }
      ::usleep(10000);
    }
  }
  ~Child() {
    if (out >= 0) ::close(out);
    if (status >= 0) ::close(status);
  }
};
}  // namespace

TEST_CASE("OutputPump: writes never block while nobody reads; the lines come out in order, the drop noted") {
  Child c;
  std::string status;
  // Nobody reads `out` yet: without the pump the child blocks in printf after 64 KiB.
  CHECK(read_until(c.status, status, "wrote", 20000));
  std::string got;  // both streams, to the end: the child writes out what it queued, then exits
  CHECK(read_until(c.out, got, "", 20000));
  CHECK(c.wait(20000) == 0);
  CHECK(got.find("the last line\n") != std::string::npos);
  CHECK_MESSAGE(got.rfind("line 000000 of the child's output\n", 0) == 0, got.substr(0, 200));  // the first line first
  const size_t note = got.find("ringfence: ");
  REQUIRE(note != std::string::npos);
  CHECK(got.find(" line(s) of output (", note) != std::string::npos);
  // What was kept is whole lines, in order: each line's number is above the one before.
  int last = -1, kept = 0;
  bool ordered = true;
  for (size_t at = got.find("line "); at != std::string::npos; at = got.find("\nline ", at + 1)) {
    const size_t start = got[at] == '\n' ? at + 1 : at;
    const int n = std::stoi(got.substr(start + 5, 6));
    ordered = ordered && n > last;
    last = n;
    ++kept;
  }
  CHECK(ordered);
  CHECK(kept > 1000);
  CHECK(kept < kLines);
}

// Two threads, one on stdout and one on stderr, into one pipe (as `2>&1` or a terminal).
[[noreturn]] void two_streams_child(int out, int status) {
  ::dup2(out, STDOUT_FILENO);
  ::dup2(out, STDERR_FILENO);
  rf::OutputPump::install();  // the default capacity: nothing is dropped
  std::thread err([] {
    for (int i = 0; i < kLines / 2; ++i) std::fprintf(stderr, "err %06d of the child's output\n", i);
  });
  for (int i = 0; i < kLines / 2; ++i) std::printf("out %06d of the child's output\n", i);
  err.join();
  std::fflush(stdout);
  (void)!::write(status, "wrote\n", 6);
  std::exit(0);
}

TEST_CASE("OutputPump: stdout and stderr into one output interleave whole lines, never parts of lines") {
  Child c(two_streams_child);
  std::string status;
  CHECK(read_until(c.status, status, "wrote", 20000));  // both queues hold most of it now
  std::string got;
  CHECK(read_until(c.out, got, "", 20000));
  CHECK(c.wait(20000) == 0);
  // Every line is one of the child's lines, whole; each stream's lines all come, in order.
  int next[2] = {0, 0};
  size_t torn = 0, out_of_order = 0, lines = 0;
  std::string first_torn;
  for (size_t at = 0; at < got.size();) {
    size_t end = got.find('\n', at);
    if (end == std::string::npos) end = got.size();
    const std::string line = got.substr(at, end - at);
    at = end + 1;
    ++lines;
    const int which = line.rfind("out ", 0) == 0 ? 0 : line.rfind("err ", 0) == 0 ? 1 : -1;
    if (which < 0 || line.size() != 32 || line.compare(10, 22, " of the child's output") != 0 ||
        line.find_first_not_of("0123456789", 4) != 10) {
      if (torn++ == 0) first_torn = line;
      continue;
    }
    const int n = std::stoi(line.substr(4, 6));
    out_of_order += n != next[which];
    next[which] = n + 1;
  }
  CHECK_MESSAGE(torn == 0, torn, " torn line(s), the first: '", first_torn, "'");
  CHECK(out_of_order == 0);
  CHECK(next[0] == kLines / 2);
  CHECK(next[1] == kLines / 2);
  CHECK(lines == static_cast<size_t>(kLines));
}

TEST_CASE("OutputPump: a reader that is gone costs the output, not the process") {
  Child c;
  ::close(c.out);  // every write to it is EPIPE (SIGPIPE without the pump)
  c.out = -1;
  std::string status;
  CHECK(read_until(c.status, status, "wrote", 20000));
  CHECK(c.wait(20000) == 0);
}

TEST_CASE("OutputPump: not installed, flush() has nothing to do and is_terminal() is isatty()") {
  CHECK_FALSE(rf::OutputPump::installed());
  CHECK(rf::OutputPump::flush(std::chrono::milliseconds(0)));
  CHECK(rf::OutputPump::is_terminal(STDOUT_FILENO) == (::isatty(STDOUT_FILENO) == 1));
  CHECK(rf::OutputPump::stats().dropped_lines == 0);
}
