#pragma once
// A process's CPU time and resident memory from /proc, for the scale bench's measurements
// of the coordinator (another process) and of the load generator itself.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "base/clock.h"

struct ProcSample {
  rf::TimePoint at;
  double cpu_s = 0;   // user + system
  long rss_kb = 0;    // VmRSS

  static ProcSample of(int pid) {
    ProcSample p;
    p.at = rf::Clock::now();
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    const auto close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream in(line.substr(close + 2));
      std::string f;
      long long utime = 0, stime = 0;
      for (int i = 3; i <= 15 && in >> f; ++i) {
        if (i == 14) utime = std::stoll(f);
        if (i == 15) stime = std::stoll(f);
      }
      p.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    while (std::getline(status, line))
      if (line.rfind("VmRSS:", 0) == 0) p.rss_kb = std::stol(line.substr(6));
    return p;
  }
  // Percent of one core between `before` and this sample.
  double cpu_pct_since(const ProcSample& before) const {
    const double wall = std::chrono::duration<double>(at - before.at).count();
    return wall > 0 ? 100.0 * (cpu_s - before.cpu_s) / wall : 0.0;
  }
};
