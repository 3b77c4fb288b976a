#include "comm/nccl/determinism.h"

#include "base/str.h"

namespace rf::comm::nccl {

std::vector<EnvChoice> determinism_env(bool deterministic, const std::function<const char*(const char*)>& getenv) {
  std::vector<EnvChoice> out;
  if (!deterministic) return out;
  const std::pair<const char*, const char*> wanted[] = {
      {"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}, {"NCCL_NVLS_ENABLE", "0"}, {"NCCL_COLLNET_ENABLE", "0"}};
  for (const auto& [name, value] : wanted) {
    EnvChoice c{name, value, false, ""};
    if (const char* v = getenv(name); v != nullptr && *v != '\0') {
      c.kept = true;
      c.existing = v;
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string describe_determinism(bool deterministic, const std::vector<EnvChoice>& choices) {
  if (!deterministic) return "not deterministic (NCCL tunes algorithm, protocol and channels per call)";
  std::string s = "deterministic (";
  for (const EnvChoice& c : choices) s += rf::str(c.name, "=", c.kept ? c.existing : c.value, c.kept && c.existing != c.value ? " [set by the user: the order may vary]" : "", ", ");
  return s + rf::str(kDeterministicChannels, " channels)");
}

}  // namespace rf::comm::nccl
