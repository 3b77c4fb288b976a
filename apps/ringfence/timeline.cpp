#include "apps/ringfence/timeline.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/log.h"

namespace rf::apps {

using nlohmann::json;

int print_timeline(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    rf::log::error("timeline", "cannot open '", path, "'");
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
    // Generation and step only where the event has them (the coordinator's "listening"
    // line has neither): blanks of the same width keep the columns aligned.
    auto field = [&](const char* key, const char* label, int width) {
      if (!e.contains(key) || e[key].is_null()) return std::string(std::strlen(label) + 1 + width, ' ');
      std::string v = e[key].is_string() ? e[key].get<std::string>() : e[key].dump();
      if (static_cast<int>(v.size()) < width) v.resize(width, ' ');
      return std::string(label) + " " + v;
    };
    std::string out(512, '\0');
    const int len = std::snprintf(out.data(), out.size(), "%+10.3f s  %-22s %-20s %s %s", (ts - t0) / 1e6,
                                  event.c_str(), cause.c_str(), field("g", "g", 3).c_str(), field("s", "s", 6).c_str());
    out.resize(static_cast<size_t>(std::clamp(len, 0, static_cast<int>(out.size()) - 1)));
    out += who + extra;
    out.erase(out.find_last_not_of(' ') + 1);  // no trailing blanks where there is no g/s
    std::printf("%s\n", out.c_str());
    ++n;
  }
  if (bad) rf::log::warn("timeline", bad, " line(s) were not events and were skipped");
  if (n == 0) {
    rf::log::error("timeline", "no events in '", path, "'");
    return 1;
  }
  return 0;
}

}  // namespace rf::apps
