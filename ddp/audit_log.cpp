#include "ddp/audit_log.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"

namespace rf::ddp {

AuditLog::AuditLog(const std::string& path, int slot, int64_t incarnation) : slot_(slot), incarnation_(incarnation) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw InvalidInput(str("audit log ", path, ": cannot open for appending"));
}

AuditLog::~AuditLog() {
  if (f_) std::fclose(f_);
}

void AuditLog::record(const char* event, uint64_t generation, int64_t step, const std::string& digest, int rank,
                      int world, const std::string& extra_json) {
  if (!f_) return;
  const int phase = phase_.load();
  const std::string phase_json =
      phase < 0 ? std::string() : str(",\"phase\":\"", recovery_phase_name(static_cast<RecoveryPhase>(phase)), "\"");
  const std::string line =
      str("{\"event\":\"", event, "\",\"ts_us\":", wall_us(), ",\"g\":", generation, ",\"s\":", step, ",\"digest\":\"", digest,
          "\",\"rank\":", rank, ",\"world\":", world, ",\"slot\":", slot_, ",\"inc\":", incarnation_, phase_json,
          extra_json.empty() ? "" : ",", extra_json, "}\n");
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace rf::ddp
