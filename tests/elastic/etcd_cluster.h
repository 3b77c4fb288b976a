#pragma once
// A real etcd cluster of N members on loopback for tests (Debian's etcd-server 3.4): each
// member a child process with its own data directory under a fresh temp dir, ports picked
// free by the kernel, PR_SET_PDEATHSIG so it dies with the test, and a destructor that
// SIGKILLs and reaps every member by PID and removes the directories. start() returns
// once every member answers /health (a condition with a deadline, no sleeps).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/str.h"
#include "elastic/etcd_client.h"

namespace rf::elastic::testing {

// Why etcd cannot run here ("" when it can).
inline std::string etcd_unavailable_reason() {
  if (!etcd_client_built()) return "this build has no etcd client (libcurl was not found when it was configured)";
  if (std::system("command -v etcd >/dev/null 2>&1") != 0)
    return "no 'etcd' binary on PATH (Debian's etcd-server; scripts/setup installs it)";
  return "";
}

class EtcdCluster {
 public:
  explicit EtcdCluster(int members) : n_(members) {
    char tmpl[] = "/tmp/rf-etcd-XXXXXX";
    dir_ = mkdtemp(tmpl);
    for (int i = 0; i < n_; ++i) {
      client_ports_.push_back(free_port());
      peer_ports_.push_back(free_port());
    }
    pids_.assign(static_cast<size_t>(n_), -1);
  }
  ~EtcdCluster() {
    for (int i = 0; i < n_; ++i) kill_member(i);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // Starts every member; true once all answer /health within `deadline`.
  bool start(Duration deadline = std::chrono::seconds(30)) {
    for (int i = 0; i < n_; ++i) start_member(i);
    const TimePoint end = Clock::now() + deadline;
    for (int i = 0; i < n_; ++i)
      while (!healthy(i)) {
        if (Clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll interval
      }
    return true;
  }
  void kill_member(int i) {
    pid_t& p = pids_[static_cast<size_t>(i)];
    if (p <= 0) return;
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
    p = -1;
  }
  std::string url(int i) const { return rf::str("http://127.0.0.1:", client_ports_[static_cast<size_t>(i)]); }
  std::vector<std::string> urls() const {
    std::vector<std::string> u;
    for (int i = 0; i < n_; ++i) u.push_back(url(i));
    return u;
  }
  std::string endpoints() const {  // "url0,url1,..."
    std::string s;
    for (int i = 0; i < n_; ++i) s += (i ? "," : "") + url(i);
    return s;
  }

 private:
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
  }
  std::string name(int i) const { return rf::str("m", i); }
  void start_member(int i) {
    std::string cluster;
    for (int j = 0; j < n_; ++j)
      cluster += rf::str(j ? "," : "", name(j), "=http://127.0.0.1:", peer_ports_[static_cast<size_t>(j)]);
    const std::vector<std::string> args = {
        "etcd", "--name", name(i), "--data-dir", rf::str(dir_, "/", name(i)),
        "--listen-client-urls", url(i), "--advertise-client-urls", url(i),
        "--listen-peer-urls", rf::str("http://127.0.0.1:", peer_ports_[static_cast<size_t>(i)]),
        "--initial-advertise-peer-urls", rf::str("http://127.0.0.1:", peer_ports_[static_cast<size_t>(i)]),
        "--initial-cluster", cluster, "--initial-cluster-state", "new", "--initial-cluster-token", dir_,
        // Fast elections on loopback: a member's death is noticed in about a second.
        "--heartbeat-interval", "50", "--election-timeout", "500", "--log-level", "error"};
    const std::string log = rf::str(dir_, "/", name(i), ".log");
    const pid_t parent = getpid();
    const pid_t p = fork();
    if (p == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      FILE* f = std::fopen(log.c_str(), "w");
      if (f) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execvp("etcd", argv.data());
      _exit(127);
    }
    pids_[static_cast<size_t>(i)] = p;
  }
  bool healthy(int i) {
    try {
      EtcdClient c({{url(i)}, std::chrono::milliseconds(500)});
      (void)c.get("/health-probe");
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  int n_;
  std::string dir_;
  std::vector<int> client_ports_, peer_ports_;
  std::vector<pid_t> pids_;
};

}  // namespace rf::elastic::testing
