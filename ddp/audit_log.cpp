#include "ddp/audit_log.h"

#include "base/clock.h"
#include "base/enforce.h"
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
                      int world, const nlohmann::ordered_json& extra) {
  if (!f_) return;
  nlohmann::ordered_json line{{"event", event}, {"ts_us", wall_us()}, {"g", generation}, {"s", step},
                              {"digest", digest}, {"rank", rank},   {"world", world},   {"slot", slot_},
                              {"inc", incarnation_}};
  if (const int phase = phase_.load(); phase >= 0) line["phase"] = recovery_phase_name(static_cast<RecoveryPhase>(phase));
  RF_ENFORCE(extra.is_null() || extra.is_object(), "audit line extra fields must be an object: ", extra.dump());
  if (extra.is_object())
    for (const auto& [key, value] : extra.items()) line[key] = value;
  const std::string text = line.dump() + "\n";
  std::fwrite(text.data(), 1, text.size(), f_);
  std::fflush(f_);
}

}  // namespace rf::ddp
