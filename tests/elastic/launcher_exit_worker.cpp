// A worker for the launcher's exit tests (test_launcher_exits.cpp): it registers with the
// coordinator the way every worker does (Client::join) and then, as fast as it can:
//   launcher_exit_worker join-exit SLOT STATUS PROGRAM...
//       in SLOT, incarnation 0: join, then _exit(STATUS) at once (no leave, no sleep);
//       every other slot and incarnation execs PROGRAM...
//   launcher_exit_worker die-before-join SLOT signal|exit N PROGRAM...
//       in SLOT, incarnation 0: before any contact with the coordinator, kill itself with
//       signal N (as the OOM killer or a `kill -9` of a starting worker would) or _exit(N)
//       (a start-up error that a restart may not meet again); every other slot and
//       incarnation execs PROGRAM...
//   launcher_exit_worker fail-after-join SLOT TEXT PROGRAM...
//       in SLOT, every incarnation after the first (a replacement: the test ends the
//       first, e.g. with --inject exit:...): join, write TEXT with " (incarnation I)" to
//       RINGFENCE_ERROR_FILE and exit 1 at once — the same error every time, but a number
//       in it differs (as a step in a path would); everything else execs PROGRAM...
//   launcher_exit_worker fatal TEXT
//       join, report TEXT as a fatal error (Client::fatal), exit 1 — every slot, every
//       incarnation: a configuration error that a restart would meet again.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "elastic/client.h"
#include "elastic/error_file.h"

using namespace rf::elastic;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "join-exit" && argc >= 5) {
      const ClientOptions opt = ClientOptions::from_env();
      if (opt.slot == std::atoi(argv[2]) && opt.incarnation == 0) {
        Client client(opt);
        client.join();
        _exit(std::atoi(argv[3]));
      }
      execv(argv[4], argv + 4);
      std::fprintf(stderr, "launcher_exit_worker: cannot run %s\n", argv[4]);
      return 127;
    }
    if (mode == "die-before-join" && argc >= 6) {
      const ClientOptions opt = ClientOptions::from_env();
      const std::string how = argv[3];
      const int n = std::atoi(argv[4]);
      if (opt.slot == std::atoi(argv[2]) && opt.incarnation == 0) {
        if (how == "signal") {
          ::signal(n, SIG_DFL);
          ::kill(getpid(), n);
        }
        if (how == "exit") _exit(n);
        std::fprintf(stderr, "launcher_exit_worker: die-before-join: '%s' is neither signal nor exit, or signal %d "
                     "did not end the process\n", how.c_str(), n);
        return 125;
      }
      execv(argv[5], argv + 5);
      std::fprintf(stderr, "launcher_exit_worker: cannot run %s\n", argv[5]);
      return 127;
    }
    if (mode == "fail-after-join" && argc >= 5) {
      const ClientOptions opt = ClientOptions::from_env();
      if (opt.slot == std::atoi(argv[2]) && opt.incarnation > 0) {
        Client client(opt);
        client.join();  // a replacement in a job that ran
        const std::string text = std::string(argv[3]) + " (incarnation " + std::to_string(opt.incarnation) + ")";
        std::fprintf(stderr, "launcher_exit_worker: error: %s\n", text.c_str());
        report_error_to_launcher("launcher_exit_worker: error: " + text);
        _exit(1);
      }
      execv(argv[4], argv + 4);
      std::fprintf(stderr, "launcher_exit_worker: cannot run %s\n", argv[4]);
      return 127;
    }
    if (mode == "fatal" && argc == 3) {
      Client client(ClientOptions::from_env());
      client.join();
      client.fatal(argv[2]);
      return 1;
    }
  } catch (const rf::Error& e) {
    std::fprintf(stderr, "launcher_exit_worker: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: launcher_exit_worker join-exit SLOT STATUS PROGRAM... | die-before-join SLOT signal|exit N "
               "PROGRAM... | fail-after-join SLOT TEXT PROGRAM... | fatal TEXT\n");
  return 2;
}
