#include "base/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rf::log {
namespace {

constexpr int kUnknown = -1;

struct Place {
  std::atomic<int> slot{kUnknown};
  std::atomic<int> rank{kUnknown};
  std::atomic<int64_t> generation{kUnknown};
  std::atomic<int64_t> step{kUnknown};
};

Place& place() {
  static Place p;
  return p;
}

Level level_from_env() {
  const char* v = std::getenv("RINGFENCE_LOG_LEVEL");
  if (v == nullptr) return Level::info;
  // An unknown value gives the default (said once, below).
  return parse_enum(kLevelNames, v).value_or(Level::info);
}

std::atomic<int>& level_store() {
  static std::atomic<int> l{static_cast<int>(level_from_env())};
  return l;
}

void append_field(std::string& out, int64_t v) {
  if (v == kUnknown)
    out += '-';
  else
    out += std::to_string(v);
}

}  // namespace

std::string_view to_string(Level level) { return name_of(kLevelNames, level); }

void set_slot(int slot) { place().slot.store(slot, std::memory_order_relaxed); }
void set_rank(int rank) { place().rank.store(rank, std::memory_order_relaxed); }
void set_generation(uint64_t g) { place().generation.store(static_cast<int64_t>(g), std::memory_order_relaxed); }
void set_step(int64_t step) { place().step.store(step, std::memory_order_relaxed); }

void set_level(Level level) { level_store().store(static_cast<int>(level), std::memory_order_relaxed); }
bool enabled(Level level) { return static_cast<int>(level) >= level_store().load(std::memory_order_relaxed); }

std::string format_line(Level level, std::string_view subsystem, std::string_view text) {
  const Place& p = place();
  int slot = p.slot.load(std::memory_order_relaxed);
  std::string line = "ringfence ";
  if (slot != kUnknown) {
    line += '[';
    append_field(line, slot);
    line += '/';
    append_field(line, p.rank.load(std::memory_order_relaxed));
    line += " g";
    append_field(line, p.generation.load(std::memory_order_relaxed));
    line += " s";
    append_field(line, p.step.load(std::memory_order_relaxed));
    line += "] ";
  }
  line += to_string(level);
  line += ' ';
  line += subsystem;
  line += ": ";
  line += text;
  return line;
}

void write(Level level, std::string_view subsystem, std::string_view text) {
  std::string line = format_line(level, subsystem, text);
  line += '\n';
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {  // one write(2) unless stderr is a pipe that takes it in parts
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr closed: nothing to tell anyone
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace rf::log
