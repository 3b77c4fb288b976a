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

std::vector<OrderRisk> order_risks(bool deterministic, const std::function<const char*(const char*)>& getenv,
                                   const std::function<bool(const std::string&)>& exists) {
  std::vector<OrderRisk> out;
  if (!deterministic) return out;
  const std::pair<const char*, const char*> variables[] = {
      {"NCCL_MIN_CTAS", "the channel count (it overrides the config's fixed count)"},
      {"NCCL_MAX_CTAS", "the channel count (it overrides the config's fixed count)"},
      {"NCCL_MIN_NCHANNELS", "the channel count (it may exceed the config's)"},
      {"NCCL_MAX_NCHANNELS", "the channel count"},
      {"NCCL_MIN_NRINGS", "the channel count"},
      {"NCCL_MAX_NRINGS", "the channel count"},
      {"NCCL_NTHREADS", "the channels used per call"},
      {"NCCL_THREAD_THRESHOLDS", "the channels used per call"},
      {"NCCL_WORK_ARGS_BYTES", "the channels used per call"},
      {"NCCL_BUFFSIZE", "the chunk size"},
      {"NCCL_TUNER_PLUGIN", "the channels per call (a tuner chooses them)"},
      {"NCCL_GRAPH_FILE", "the ring's order"},
      {"NCCL_TOPO_FILE", "the ring's order"},
      {"NCCL_CROSS_NIC", "the ring's order"},
      {"NCCL_P2P_LEVEL", "the ring's order"},
      {"NCCL_P2P_DISABLE", "the ring's order"},
      {"NCCL_ENV_PLUGIN", "any NCCL setting (an environment plugin)"},
  };
  for (const auto& [name, what] : variables)
    if (const char* v = getenv(name); v != nullptr && *v != '\0') out.push_back({name, v, what});
  std::vector<std::string> files;
  if (const char* f = getenv("NCCL_CONF_FILE"); f != nullptr && *f != '\0') files.emplace_back(f);
  if (const char* home = getenv("HOME"); home != nullptr && *home != '\0') files.push_back(rf::str(home, "/.nccl.conf"));
  files.emplace_back("/etc/nccl.conf");
  for (const std::string& f : files)
    if (exists(f)) out.push_back({f, "", "any NCCL setting (a configuration file: its values count as the environment)"});
  return out;
}

std::string describe_order_risk(const OrderRisk& risk) {
  return rf::str(risk.value.empty() ? risk.name : rf::str(risk.name, "=", risk.value), " may change ", risk.what,
                 " and so the all-reduce's summation order: the bitwise claim holds only while every rank, "
                 "replacements included, runs with the same setting");
}

}  // namespace rf::comm::nccl
