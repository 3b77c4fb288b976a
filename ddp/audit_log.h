#pragma once
// AuditLog — one JSON line per state change of this worker, so tests can check docs/protocol.md's
// "each step applied exactly once on every lineage" and "every replica bitwise identical":
//   {"event":"apply","ts_us":1796…,"g":2,"s":41,"digest":"…","rank":1,"world":3,"slot":1,"inc":0,"loss":0.51}
//   {"event":"transfer","g":2,"s":40,"digest":"…","source":0,…}   state received (R6)
//   {"event":"start","g":1,"s":-1,"digest":"…",…}                 fresh start
//   {"event":"inject","g":1,"s":20,"spec":"kill:rank=1:…",…}        a fault about to fire
// A line written during a recovery also names its phase (ddp/recovery_phase.h), after the
// fields above: {"event":"transfer",…,"inc":0,"phase":"transfer","source":0,…}.
// ts_us is wall time (µs since the epoch), comparable across processes on one machine.
// Lines are written whole and flushed, so a SIGKILL loses at most the line being written.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "ddp/recovery_phase.h"

namespace rf::ddp {

class AuditLog {
 public:
  AuditLog() = default;
  // Appends to `path` ("" = disabled). Throws rf::InvalidInput when it cannot be opened.
  AuditLog(const std::string& path, int slot, int64_t incarnation);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;
  bool enabled() const { return f_ != nullptr; }
  // The recovery phase the lines written from now on name (nullopt: training, none).
  // Atomic: a fault's line may be written from the communicator's progress thread.
  void set_phase(std::optional<RecoveryPhase> phase) { phase_.store(phase ? static_cast<int>(*phase) : -1); }
  // One line: the fields above, then `extra`'s (an object, or null for none) in its order.
  void record(const char* event, uint64_t generation, int64_t step, const std::string& digest, int rank,
              int world, const nlohmann::ordered_json& extra = nullptr);

 private:
  std::FILE* f_ = nullptr;
  int slot_ = 0;
  int64_t incarnation_ = 0;
  std::atomic<int> phase_{-1};
};

}  // namespace rf::ddp
