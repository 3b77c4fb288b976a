// A worker for the launcher's exit tests (test_launcher_exits.cpp): it registers with the
// coordinator the way every worker does (Client::join) and then, as fast as it can:
//   launcher_exit_worker join-exit SLOT STATUS PROGRAM...
//       in SLOT, incarnation 0: join, then _exit(STATUS) at once (no leave, no sleep);
//       every other slot and incarnation execs PROGRAM...
//   launcher_exit_worker fatal TEXT
//       join, report TEXT as a fatal error (Client::fatal), exit 1 — every slot, every
//       incarnation: a configuration error that a restart would meet again.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "elastic/client.h"

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
  std::fprintf(stderr, "usage: launcher_exit_worker join-exit SLOT STATUS PROGRAM... | fatal TEXT\n");
  return 2;
}
