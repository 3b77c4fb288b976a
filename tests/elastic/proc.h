#pragma once
// Helpers for the multi-process tests: spawn a child in its own process group (it dies
// with the test via PDEATHSIG), wait for it with a deadline, kill its whole group on
// scope exit; read the coordinator's JSON-lines event log and wait for a line matching a
// condition (re-reading the file, bounded by a deadline — never a blind sleep).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"

extern char** environ;

namespace rf::test {

// The whole test program's own deadline, below its ctest TIMEOUT (tests/elastic/
// CMakeLists.txt sets RF_TEST_BUDGET_S for each program): every wait below is capped by
// what is left of it, so when things hang the test fails with its own diagnostics (the
// launcher's output, the event log) instead of ctest killing it with nothing printed.
#ifndef RF_TEST_BUDGET_S
#error "define RF_TEST_BUDGET_S (seconds, below the test's ctest TIMEOUT)"
#endif
inline const rf::TimePoint kTestProgramEnd = rf::Clock::now() + std::chrono::seconds(RF_TEST_BUDGET_S);
// `d`, or less when the program's deadline comes first.
inline rf::Duration capped(rf::Duration d) {
  return std::clamp<rf::Duration>(kTestProgramEnd - rf::Clock::now(), rf::Duration::zero(), d);
}

using nlohmann::json;

class Proc {
 public:
  Proc() = default;
  Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
       const std::string& out_path) {
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      std::string s = *e;
      if (!env.count(s.substr(0, s.find('=')))) envs.push_back(s);
    }
    for (auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> a, e;
    std::vector<std::string> args = argv;
    for (auto& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : envs) e.push_back(s.data());
    e.push_back(nullptr);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
      execve(a[0], a.data(), e.data());
      _exit(127);
    }
    setpgid(pid_, pid_);
  }
  Proc(Proc&& o) noexcept : pid_(o.pid_), status_(o.status_) { o.pid_ = -1; }
  Proc& operator=(Proc&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(status_, o.status_);
    return *this;
  }
  ~Proc() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) const { ::kill(pid_, sig); }
  // Exit status (negative: killed by that signal), or nullopt if still running at the deadline.
  std::optional<int> wait(rf::Duration timeout) {
    if (status_) return status_;
    const auto deadline = rf::Clock::now() + capped(timeout);
    while (true) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        ::kill(-pid_, SIGKILL);  // anything left in its group
        pid_ = -1;
        return status_;
      }
      if (rf::Clock::now() >= deadline) return std::nullopt;
      ::poll(nullptr, 0, 2);
    }
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Waits (re-reading, bounded by the deadline) until the file at `path` contains `text`.
inline bool wait_text(const std::string& path, const std::string& text, rf::Duration timeout) {
  const auto deadline = rf::Clock::now() + capped(timeout);
  while (slurp(path).find(text) == std::string::npos) {
    if (rf::Clock::now() >= deadline) return false;
    ::poll(nullptr, 0, 3);
  }
  return true;
}

// How many times `what` occurs in `text` (a launcher's output: said once, not per spawn).
inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

inline std::vector<json> read_events(const std::string& path) {
  std::vector<json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(json::parse(line, nullptr, false));
  return out;
}

// The first event matching `pred` (re-reading the log until the deadline).
inline std::optional<json> wait_event(const std::string& path, const std::function<bool(const json&)>& pred,
                                      rf::Duration timeout) {
  const auto deadline = rf::Clock::now() + capped(timeout);
  while (true) {
    for (const auto& e : read_events(path))
      if (!e.is_discarded() && pred(e)) return e;
    if (rf::Clock::now() >= deadline) return std::nullopt;
    ::poll(nullptr, 0, 3);
  }
}

inline std::function<bool(const json&)> is_event(const std::string& event, int64_t g = -1,
                                                 const std::string& cause = "") {
  return [=](const json& e) {
    return e.value("event", "") == event && (g < 0 || e.value("g", int64_t{-1}) == g) &&
           (cause.empty() || e.value("cause", "") == cause);
  };
}

inline std::string temp_dir(const std::string& name) {
  std::string t = "/tmp/rf-" + name + "-XXXXXX";
  if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
  return t;
}

// Removes a temp_dir() on scope exit (failure messages already carry the logs).
struct TempDirGuard {
  std::string path;
  ~TempDirGuard() {
    std::error_code ec;
    if (path.rfind("/tmp/rf-", 0) == 0) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace rf::test
