#pragma once
// One logger for every process of a job. A line is
//
//   ringfence [1/0 g3 s150] warn ckpt: step 199 not checkpointed: ...
//             |  |  |  |    |    |
//          slot rank |  step level subsystem
//               generation
//
// The bracket holds what this process knows of its place in the job ('-' where a field is
// not known yet) and is left out by processes outside it (the launcher, the coordinator).
// Each line is one write(2) to stderr, so lines of concurrent threads and processes never
// interleave. The level comes from RINGFENCE_LOG_LEVEL (debug, info, warn, error; info
// when unset) or set_level(); lines below it cost one relaxed load.
//
//   rf::log::info("comm", "rank ", r, " connected to ", peers, " peers");
//   static std::atomic<bool> said{false};
//   if (rf::log::first(said)) rf::log::warn("comm", "no shared-memory path: ", e.what());
#include <atomic>
#include <cstdint>
#include <string_view>

#include "base/enum_names.h"
#include "base/str.h"

namespace rf::log {

enum class Level : uint8_t { debug, info, warn, error };
inline constexpr EnumName<Level> kLevelNames[] = {
    {Level::debug, "debug"}, {Level::info, "info"}, {Level::warn, "warn"}, {Level::error, "error"}};
static_assert(lists_each_once(kLevelNames));
std::string_view to_string(Level level);

// The process's place in the job, printed in each line's bracket; set as it becomes known.
void set_slot(int slot);
void set_rank(int rank);  // -1: not a member
void set_generation(uint64_t generation);
void set_step(int64_t step);

void set_level(Level level);
bool enabled(Level level);

// The line as written, without the trailing newline (for tests).
std::string format_line(Level level, std::string_view subsystem, std::string_view text);
void write(Level level, std::string_view subsystem, std::string_view text);

// True the first time it is called with this flag: "said once" warnings.
inline bool first(std::atomic<bool>& said) { return !said.exchange(true, std::memory_order_relaxed); }

template <typename... Args>
void debug(std::string_view subsystem, Args&&... args) {
  if (enabled(Level::debug)) write(Level::debug, subsystem, rf::str(std::forward<Args>(args)...));
}
template <typename... Args>
void info(std::string_view subsystem, Args&&... args) {
  if (enabled(Level::info)) write(Level::info, subsystem, rf::str(std::forward<Args>(args)...));
}
template <typename... Args>
void warn(std::string_view subsystem, Args&&... args) {
  if (enabled(Level::warn)) write(Level::warn, subsystem, rf::str(std::forward<Args>(args)...));
}
template <typename... Args>
void error(std::string_view subsystem, Args&&... args) {
  if (enabled(Level::error)) write(Level::error, subsystem, rf::str(std::forward<Args>(args)...));
}

}  // namespace rf::log
