#include "elastic/fault_spec.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "base/error.h"
#include "base/str.h"

namespace rf::elastic {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw rf::InvalidInput(rf::str("fault spec '", spec, "': ", why,
                                 " (expected KIND:rank=R:step=S[:phase=P][:after_chunks=K] or "
                                 "KIND:rank=R:at=SECONDS, KIND in kill|stop|hang|exit|drop|slow|disk|gpu_hang; slow also "
                                 "takes :factor=F:steps=N, disk :error=ENOSPC|EIO|EROFS|EDQUOT:delay=SECONDS:writes=N, stop :for=SECONDS)"));
}

int64_t parse_int(const std::string& spec, const std::string& key, const std::string& v,
                  int64_t min) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size())
    bad(spec, rf::str(key, "='", v, "' is not an integer"));
  if (x < min) bad(spec, rf::str(key, "=", x, " must be >= ", min));
  return x;
}

// A finite number in [min, max], named in the error.
double parse_real(const std::string& spec, const std::string& key, const std::string& v, double min, double max,
                  const char* what) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x < min || x > max)
    bad(spec, rf::str(key, "='", v, "' is not ", what));
  return x;
}

// The shortest text that reads back as the same double, so parse(to_string(x)) == x for
// every value (an ostream's 6 significant digits would round 1.2345678 to 1.23457).
std::string shortest(double x) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  return ec == std::errc() ? std::string(buf, end) : rf::str(x);
}

// The errnos a disk fault may fail a checkpoint write with, by name.
constexpr std::pair<const char*, int> kDiskErrors[] = {
    {"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EROFS", EROFS}, {"EDQUOT", EDQUOT}};

}  // namespace

const char* to_string(FaultKind k) { return name_of(kFaultKindNames, k); }

const char* disk_error_name(int err) {
  for (const auto& [name, e] : kDiskErrors)
    if (e == err) return name;
  return "?";
}

const char* to_string(FaultPhase p) { return name_of(kFaultPhaseNames, p); }

namespace {

FaultKind parse_kind(const std::string& text, const std::string& word) {
  if (const auto k = parse_enum(kFaultKindNames, word)) return *k;
  bad(text, rf::str("unknown kind '", word, "'"));
  return FaultKind::Kill;  // not reached: bad() throws
}

std::optional<FaultPhase> parse_phase_word(const std::string& word) { return parse_enum(kFaultPhaseNames, word); }

// One key=value of the spec `text` into f.
void set_key(FaultSpec& f, const std::string& text, const std::string& key, const std::string& v) {
  if (key == "rank") {
    f.rank = static_cast<int>(parse_int(text, key, v, 0));
    if (f.rank > 1'000'000) bad(text, "rank is too large");
  } else if (key == "step") {
    f.step = parse_int(text, key, v, 0);
  } else if (key == "after_chunks") {
    f.after_chunks = parse_int(text, key, v, 0);
  } else if (key == "at") {
    f.at_seconds = parse_real(text, key, v, 0, 1e7, "a time in seconds >= 0");
  } else if (key == "factor") {
    f.factor = parse_real(text, key, v, 1, 1000, "a number from 1 to 1000 (a step takes factor x its usual time)");
  } else if (key == "steps") {
    f.steps = parse_int(text, key, v, 1);
    if (*f.steps > 1'000'000'000) bad(text, "steps= is too large");
  } else if (key == "error") {
    for (const auto& [name, e] : kDiskErrors)
      if (v == name) f.error = e;
    if (!f.error) bad(text, rf::str("error='", v, "' is not one of ENOSPC, EIO, EROFS, EDQUOT"));
  } else if (key == "delay") {
    f.delay_s = parse_real(text, key, v, 0, 3600, "a time in seconds from 0 to 3600");
  } else if (key == "writes") {
    f.writes = parse_int(text, key, v, 1);
    if (*f.writes > 1'000'000) bad(text, "writes= is too large");
  } else if (key == "for") {
    f.for_s = parse_real(text, key, v, 0.001, 3600, "a time in seconds from 0.001 to 3600");
  } else if (key == "phase") {
    f.phase = parse_phase_word(v);
    if (!f.phase) bad(text, rf::str("unknown phase '", v, "'"));
  } else {
    bad(text, rf::str("unknown key '", key, "'"));
  }
}

// The keys that do not go together, or not with f's kind.
void check_combination(const FaultSpec& f, const std::string& text) {
  if (f.step && f.at_seconds) bad(text, "give either step= or at=, not both");
  if (!f.step && !f.at_seconds) bad(text, "one of step= or at= is required");
  if (f.at_seconds && (f.phase || f.after_chunks))
    bad(text, "phase= and after_chunks= only go with step=");
  if ((f.factor || f.steps) && f.kind != FaultKind::Slow)
    bad(text, rf::str("factor= and steps= only go with kind slow, not ", to_string(f.kind)));
  if (f.at_seconds && (f.factor || f.steps)) bad(text, "factor= and steps= only go with step=");
  if (f.at_seconds && f.kind != FaultKind::Kill && f.kind != FaultKind::Stop)
    bad(text, "the launcher can only kill or stop at a time (kind kill or stop with at=)");
  if ((f.error || f.delay_s || f.writes) && f.kind != FaultKind::Disk)
    bad(text, rf::str("error=, delay= and writes= only go with kind disk, not ", to_string(f.kind)));
  if (f.kind == FaultKind::Disk) {
    if (f.phase || f.after_chunks) bad(text, "a disk fault strikes the checkpoint writer: no phase= or after_chunks=");
    if (f.rank != 0) bad(text, "a disk fault strikes the checkpoint writer, rank 0: rank=0");
    if (!f.error && !f.delay_s) bad(text, "a disk fault needs error= or delay= (or both)");
  }
  if (f.for_s && (f.kind != FaultKind::Stop || !f.step))
    bad(text, "for= only goes with kind stop and step= (the worker freezes itself, then goes on)");
  if (f.kind == FaultKind::GpuHang && f.after_chunks)
    bad(text, "gpu_hang enqueues its kernel at the start of a phase: no after_chunks=");
}

}  // namespace

FaultSpec parse_fault_spec(const std::string& text) {
  auto parts = split(text, ':');
  FaultSpec f;
  f.kind = parse_kind(text, parts[0]);
  std::set<std::string> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& kv = parts[i];
    auto eq = kv.find('=');
    if (eq == std::string::npos) bad(text, rf::str("'", kv, "' is not key=value"));
    std::string key = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (!seen.insert(key).second) bad(text, rf::str("'", key, "' given twice"));
    set_key(f, text, key, v);
  }
  if (!seen.count("rank")) bad(text, "rank= is required");
  check_combination(f, text);
  return f;
}

bool needs_gpu(FaultKind k) { return k == FaultKind::GpuHang; }

void refuse_gpu_faults_on_cpu(const std::vector<FaultSpec>& specs) {
  for (const FaultSpec& f : specs)
    if (needs_gpu(f.kind))
      throw rf::InvalidInput(rf::str("fault spec '", f.to_string(), "': ", to_string(f.kind),
                                     " makes a worker's GPU stuck, and this worker computes on the CPU: it means "
                                     "nothing there (train with --device cuda)"));
}

std::vector<FaultSpec> parse_fault_specs(const std::string& text) {
  std::vector<FaultSpec> out;
  if (text.empty()) return out;
  for (auto& part : split(text, ';')) {
    if (part.empty()) throw rf::InvalidInput(rf::str("fault spec list '", text, "' has an empty entry"));
    out.push_back(parse_fault_spec(part));
  }
  return out;
}

std::string FaultSpec::to_string() const {
  std::string s = rf::str(elastic::to_string(kind), ":rank=", rank);
  if (step) s += rf::str(":step=", *step);
  if (phase) s += rf::str(":phase=", elastic::to_string(*phase));
  if (after_chunks) s += rf::str(":after_chunks=", *after_chunks);
  if (factor) s += ":factor=" + shortest(*factor);
  if (steps) s += rf::str(":steps=", *steps);
  if (error) s += rf::str(":error=", disk_error_name(*error));
  if (delay_s) s += ":delay=" + shortest(*delay_s);
  if (writes) s += rf::str(":writes=", *writes);
  if (for_s) s += ":for=" + shortest(*for_s);
  if (at_seconds) s += ":at=" + shortest(*at_seconds);
  return s;
}

std::string join_fault_specs(const std::vector<FaultSpec>& specs) {
  std::string s;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (i) s.push_back(';');
    s.append(specs[i].to_string());
  }
  return s;
}

}  // namespace rf::elastic
