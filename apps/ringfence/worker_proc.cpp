#include "apps/ringfence/worker_proc.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "base/str.h"

namespace rf::apps {

pid_t spawn_process(const std::vector<std::string>& argv_in, std::vector<std::string> env, bool ignore_stop_signals) {
  std::vector<char*> envp, argv;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv_in;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw rf::Error(rf::str("fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    signal(SIGINT, ignore_stop_signals ? SIG_IGN : SIG_DFL);  // an ignored disposition survives exec
    signal(SIGTERM, ignore_stop_signals ? SIG_IGN : SIG_DFL);
    execvpe(argv[0], argv.data(), envp.data());
    dprintf(2, "ringfence: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

int exit_status_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st); }

}  // namespace rf::apps
