#pragma once
// Output that never stalls the process writing it (docs/launcher.md, "Output").
//
// OutputPump::install() puts a pipe in front of this process's stdout and stderr. Every
// write(2) to fd 1 or 2 — ours, a library's, a child's that inherited them — lands in that
// pipe (1 MiB where the kernel allows), and a reader thread moves it at once into an
// OutputQueue per stream (output_queue.h). A writer thread per stream copies its queue to
// the real descriptor and is the only thread that ever blocks on it: when nobody reads the
// terminal or pipe (a paused `less`, a stalled ssh link or log shipper), the queue grows to
// its capacity and then drops whole lines, counted, with one note where they were dropped.
// A reader that is gone (EPIPE) costs the output, never the process. Where stdout and
// stderr are one file (a terminal, `2>&1`), the two writers take turns, a chunk of whole
// lines each, so their lines interleave whole.
//
// `ringfence run` and `ringfence coord` install it first thing, so the launcher's live
// line, the coordinator's loop and every worker (its stdout and stderr are the launcher's
// pipe) write without blocking; what they wrote reaches the real output in order. At exit,
// what is queued is written out (flush) before the process ends.
//
// The costs: output queued behind a blocked reader is lost if the process is SIGKILLed;
// a frozen launcher (SIGSTOP) no longer drains its workers' pipe, which then holds 1 MiB
// before their writes block.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace rf {

struct OutputPumpStats {
  uint64_t dropped_lines = 0;
  uint64_t dropped_bytes = 0;
};

class OutputPump {
 public:
  static constexpr size_t kDefaultCapacity = 16u << 20;  // per stream

  // Idempotent; process-wide. Registers flush() to run at exit.
  static void install(size_t capacity = kDefaultCapacity);
  static bool installed();
  // Whether fd 1 or 2 was a terminal before install() (isatty(fd) when not installed).
  static bool is_terminal(int fd);
  // Waits until everything written to fd 1 and 2 before the call reached the real output,
  // or `deadline` passed (then false). Writes the note of lines dropped so far.
  static bool flush(std::chrono::milliseconds deadline = std::chrono::milliseconds::max());
  static OutputPumpStats stats();
};

}  // namespace rf
