// A peer that dies while the others connect (recovery step 5 for a generation whose member
// is lost before it runs): every other rank's make_communicator must fail with a typed
// comm error within its bound, never crash. W = 3: rank 2 (the victim) publishes its
// address and starts its handshake, rank 0 SIGKILLs it as soon as the address is in the
// store, and only then do ranks 0 and 1 connect, to an endpoint that is gone.
//
//   comm_connect_fail_test <tls>     tls: UCX_TLS for the ranks ("self,tcp" as between hosts,
//                                    or "default" for UCX's own choice on one host)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "base/clock.h"
#include "comm/errors.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/ucx/ucx_communicator.h"
#include "comm/ucx/ucx_context.h"
#include "tests/comm/mp_check.h"

using namespace rf;
using namespace rf::comm;
using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

constexpr int kVictim = 2;
constexpr uint64_t kGeneration = 4;

int run_rank() {
  const RankEnv re = rank_env_from_environment();
  g_rank = re.rank;
  FileStore store(re.store_dir);
  auto ctx = UcxContext::create();
  UcxOptions o;
  o.connect_timeout = std::chrono::milliseconds(10000);
  if (re.rank == kVictim) {
    store.set("victim_pid", bytes(std::to_string(getpid())));
    UcxCommunicator c(ctx, store, re.rank, re.world, kGeneration, o);  // killed in here
    EXPECT(false, "the victim connected although rank 0 never joined before killing it");
    return 1;
  }
  if (re.rank == 0) {
    const std::string pid = text(store.wait_get("victim_pid", std::chrono::milliseconds(10000)));
    (void)store.wait_get(rf::str("g", kGeneration, "/addr/", kVictim), std::chrono::milliseconds(10000));
    EXPECT(kill(static_cast<pid_t>(std::stol(pid)), SIGKILL) == 0, "could not kill the victim");
    store.set("victim_killed", bytes("1"));
  } else {
    (void)store.wait_get("victim_killed", std::chrono::milliseconds(10000));
  }
  const TimePoint t = Clock::now();
  try {
    UcxCommunicator c(ctx, store, re.rank, re.world, kGeneration, o);
    EXPECT(false, "connected to a world whose rank ", kVictim, " is dead");
  } catch (const CommError& e) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    std::cerr << "rank " << re.rank << ": connect failed after " << ms << " ms: " << e.what() << "\n";
    EXPECT(ms <= 10500, "failed only after ", ms, " ms (connect_timeout 10 s)");
  }
  return g_failures != 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RF_RANK")) {
    try {
      return run_rank();
    } catch (const std::exception& e) {
      std::cerr << "rank " << g_rank << ": unexpected error: " << e.what() << "\n";
      return 1;
    }
  }
  if (argc != 2) {
    std::cerr << "usage: comm_connect_fail_test <self,tcp | default>\n";
    return 2;
  }
  LocalLaunch l;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  l.program = n > 0 ? std::string(self, static_cast<size_t>(n)) : "/proc/self/exe";
  l.args = {argv[1]};
  l.world = 3;
  l.deadline = std::chrono::seconds(40);
  if (std::string(argv[1]) != "default") l.env.push_back({"UCX_TLS", argv[1]});
  if (!std::getenv("UCX_LOG_LEVEL")) l.env.push_back({"UCX_LOG_LEVEL", "error"});
  // A crash must show as the rank's own signal, not through UCX's handler.
  if (!std::getenv("UCX_HANDLE_ERRORS")) l.env.push_back({"UCX_HANDLE_ERRORS", "none"});
  int rc = 0;
  for (const RankExit& x : run_local_ranks(l)) {
    const bool victim = x.rank == kVictim;
    const bool expected =
        victim ? (WIFSIGNALED(x.status) && WTERMSIG(x.status) == SIGKILL && !x.killed_at_deadline) : x.ok();
    if (!expected) rc = 1;
    std::cerr << (expected ? "  ok   " : "  FAIL ") << x.describe() << "\n";
  }
  std::cerr << "comm_connect_fail_test " << argv[1] << ": " << (rc ? "FAILED" : "passed") << "\n";
  return rc;
}
