#include "apps/ringfence/timeline.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

namespace rf::apps {

using nlohmann::json;

int print_timeline(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "ringfence timeline: cannot open '%s'\n", path.c_str());
    return 2;
  }
  std::string line;
  int64_t t0 = -1;
  int n = 0, bad = 0;
  while (std::getline(f, line)) {
    json e = json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object() || !e.contains("ts_us") || !e["ts_us"].is_number_integer()) {
      ++bad;
      continue;
    }
    const int64_t ts = e["ts_us"].get<int64_t>();
    if (t0 < 0) t0 = ts;
    std::string who = "";
    if (e.contains("worker") && e["worker"].is_object())
      who = " slot " + e["worker"].value("slot", json(-1)).dump() + "/" + e["worker"].value("incarnation", json(-1)).dump();
    std::string extra;
    if (e.contains("since_failure_ms") && e["since_failure_ms"].is_number())
    {
      char buf[96];
      std::snprintf(buf, sizeof buf, " (%.1f ms after the failure could be seen)", e["since_failure_ms"].get<double>());
      extra += buf;
    }
    if (e.contains("detail") && e["detail"].is_string()) extra += " — " + e["detail"].get<std::string>();
    if (e.contains("error") && e["error"].is_string()) extra += " — " + e["error"].get<std::string>();
    const std::string event = e.value("event", "?"), cause = e.value("cause", "");
    std::printf("%+10.3f s  %-22s %-20s g %-3s s %-6s%s%s\n", (ts - t0) / 1e6, event.c_str(), cause.c_str(),
                e.value("g", json(nullptr)).dump().c_str(), e.value("s", json(nullptr)).dump().c_str(), who.c_str(),
                extra.c_str());
    ++n;
  }
  if (bad) std::fprintf(stderr, "ringfence timeline: %d line(s) were not events and were skipped\n", bad);
  if (n == 0) {
    std::fprintf(stderr, "ringfence timeline: no events in '%s'\n", path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace rf::apps
