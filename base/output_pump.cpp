#include "base/output_pump.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "base/output_queue.h"

namespace rf {

namespace {
constexpr size_t kChunk = 64 * 1024;
constexpr int kPipeBytes = 1 << 20;  // the default pipe-max-size; a smaller pipe where refused

struct Stream {
  explicit Stream(size_t capacity) : queue(capacity) {}
  int fd = -1;         // 1 or 2: the pipe's write end now
  int real = -1;       // the output fd `fd` was before install()
  int pipe_read = -1;  // read by the reader thread
  bool tty = false;
  OutputQueue queue;
  bool writing = false;  // the writer holds a chunk taken from the queue
  bool broken = false;   // the real output failed (EPIPE): everything is dropped
  bool shared = false;   // stdout and stderr are one file (a terminal, `2>&1`)
  std::condition_variable has_data;
};

struct Pump {
  explicit Pump(size_t capacity) : out(capacity), err(capacity) {}
  std::mutex mu;
  std::condition_variable progress;  // a queue moved: flush() looks again
  Stream out, err;
  std::atomic<bool> reader_busy{false};  // read a chunk that is not queued yet
  // Held around each write to a shared output: a write of more than PIPE_BUF bytes to a
  // pipe is not atomic, and the other stream's line would land inside one of ours.
  std::mutex shared_write;
  std::array<Stream*, 2> streams() { return {&out, &err}; }
};

Pump* g_pump = nullptr;  // never freed: its threads run until the process ends
std::once_flag g_once;

bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Moves whatever the pipes hold into the queues at once: this thread never writes.
void read_loop(Pump& p) {
  std::array<pollfd, 2> fds{};
  std::array<Stream*, 2> of = p.streams();
  int n = 0;
  for (Stream* s : of)
    if (s->pipe_read >= 0) fds[n++] = {s->pipe_read, POLLIN, 0};
  std::string buf(kChunk, '\0');
  while (n > 0) {
    if (::poll(fds.data(), static_cast<nfds_t>(n), -1) < 0) continue;  // EINTR
    for (int i = 0; i < n; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      p.reader_busy.store(true);
      const ssize_t got = ::read(fds[i].fd, buf.data(), buf.size());
      if (got > 0) {
        Stream& s = fds[i].fd == p.out.pipe_read ? p.out : p.err;
        std::lock_guard<std::mutex> lk(p.mu);
        s.queue.push(std::string_view(buf.data(), static_cast<size_t>(got)));
        s.has_data.notify_one();
      }
      p.reader_busy.store(false);
      if (got == 0) fds[i].fd = -1;  // every write end closed: poll ignores it from now on
    }
  }
}

bool pipe_empty(const Stream& s) {
  int n = 0;
  return s.pipe_read < 0 || (::ioctl(s.pipe_read, FIONREAD, &n) == 0 && n == 0);
}

// The only thread that blocks on the real output. A part of a line is written only when
// its rest is not on its way (in the pipe, or read and not queued yet): on a shared output
// the other stream's next line would land inside it.
void write_loop(Pump& p, Stream& s) {
  sigset_t pipe_sig;
  sigemptyset(&pipe_sig);
  sigaddset(&pipe_sig, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_sig, nullptr);  // a reader that is gone is EPIPE here
  std::unique_lock<std::mutex> lk(p.mu);
  for (;;) {
    s.has_data.wait(lk, [&] { return !s.queue.empty(); });
    if (s.queue.only_part_of_a_line() && (!pipe_empty(s) || p.reader_busy.load())) {
      s.has_data.wait_for(lk, std::chrono::milliseconds(5));  // the reader notifies; 5 ms if it read nothing
      continue;
    }
    std::string chunk = s.queue.take(kChunk);
    s.writing = true;
    lk.unlock();
    std::unique_lock<std::mutex> turn(p.shared_write, std::defer_lock);
    if (s.shared) turn.lock();
    const bool ok = write_all(s.real, chunk);
    if (turn.owns_lock()) turn.unlock();
    lk.lock();
    s.writing = false;
    if (!ok && !s.broken) {
      s.broken = true;
      s.queue.discard_all();
      s.queue.push(chunk);  // counted as dropped
    }
    p.progress.notify_all();
  }
}

void flush_at_exit() { OutputPump::flush(); }

void install_once(size_t capacity) {
  auto* p = new Pump(capacity);
  for (Stream* s : p->streams()) {
    s->fd = s == &p->out ? STDOUT_FILENO : STDERR_FILENO;
    s->tty = ::isatty(s->fd) == 1;
    s->real = ::fcntl(s->fd, F_DUPFD_CLOEXEC, 3);
    int fds[2];
    if (s->real < 0 || ::pipe2(fds, O_CLOEXEC) != 0) {  // fd closed: left as it is
      if (s->real >= 0) ::close(s->real);
      s->real = -1;
      continue;
    }
    ::fcntl(fds[1], F_SETPIPE_SZ, kPipeBytes);  // best effort: the default 64 KiB otherwise
    ::dup2(fds[1], s->fd);  // not close-on-exec: children write into the pump too
    ::close(fds[1]);
    s->pipe_read = fds[0];
  }
  struct stat o{}, e{};
  const bool same = p->out.real >= 0 && p->err.real >= 0 && ::fstat(p->out.real, &o) == 0 &&
                    ::fstat(p->err.real, &e) == 0 && o.st_dev == e.st_dev && o.st_ino == e.st_ino;
  p->out.shared = p->err.shared = same;
  // stdout is a pipe now; stdio would buffer it whole. Line by line, as on a terminal.
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  std::thread(read_loop, std::ref(*p)).detach();
  for (Stream* s : p->streams())
    if (s->real >= 0) std::thread(write_loop, std::ref(*p), std::ref(*s)).detach();
  g_pump = p;
  std::atexit(flush_at_exit);
}
}  // namespace

void OutputPump::install(size_t capacity) {
  std::call_once(g_once, [capacity] { install_once(capacity); });
}

bool OutputPump::installed() { return g_pump != nullptr; }

bool OutputPump::is_terminal(int fd) {
  if (g_pump && fd == STDOUT_FILENO) return g_pump->out.tty;
  if (g_pump && fd == STDERR_FILENO) return g_pump->err.tty;
  return ::isatty(fd) == 1;
}

bool OutputPump::flush(std::chrono::milliseconds deadline) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  Pump* p = g_pump;
  if (!p) return true;
  const auto until = deadline == std::chrono::milliseconds::max()
                         ? std::chrono::steady_clock::time_point::max()
                         : std::chrono::steady_clock::now() + deadline;
  std::unique_lock<std::mutex> lk(p->mu);
  bool noted = false;
  for (;;) {
    // Checked in this order: a chunk read from the pipe is queued before reader_busy clears.
    bool drained = true;
    for (Stream* s : p->streams()) drained = drained && pipe_empty(*s);
    drained = drained && !p->reader_busy.load();
    if (drained && !noted) {
      for (Stream* s : p->streams()) {
        s->queue.note_drops();
        if (!s->queue.empty()) s->has_data.notify_one();
      }
      noted = true;
    }
    bool written = drained;
    for (Stream* s : p->streams()) written = written && (s->real < 0 || s->broken || (s->queue.empty() && !s->writing));
    if (written) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    p->progress.wait_for(lk, std::chrono::milliseconds(5));
  }
}

OutputPumpStats OutputPump::stats() {
  OutputPumpStats st;
  if (!g_pump) return st;
  std::lock_guard<std::mutex> lk(g_pump->mu);
  for (Stream* s : g_pump->streams()) {
    st.dropped_lines += s->queue.dropped_lines();
    st.dropped_bytes += s->queue.dropped_bytes();
  }
  return st;
}

}  // namespace rf
