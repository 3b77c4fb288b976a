#pragma once
// RINGFENCE_ERROR_FILE: where a worker says why it failed. `ringfence run` names a fresh
// file for each incarnation it starts and reads it when that process exits non-zero, so
// its restart policy can tell a worker that fails the same way every time from one that
// crashed (apps/ringfence/restart_policy.h; torchelastic's error file is the same idea).
// Best effort both ways: a worker that cannot write it exits all the same, and an exit
// without one is judged by its status alone.
#include <string>

namespace rf::elastic {

inline constexpr const char* kErrorFileEnv = "RINGFENCE_ERROR_FILE";
inline constexpr size_t kMaxErrorFileBytes = 4096;

// Writes message (cut at kMaxErrorFileBytes) to $RINGFENCE_ERROR_FILE; nothing without it.
void report_error_to_launcher(const std::string& message);
// The message in path ("" when there is none), then removes the file.
std::string take_error_file(const std::string& path);

}  // namespace rf::elastic
