// A peer slow to reach the handshake (recovery step 5 on a lossy link, where each lost SYN
// of a connection costs a second) is waited for up to the connect deadline, not failed at
// the stall bound of the steps to come. W = 2: rank 1 publishes its address, then takes
// 1.5 s before it reads rank 0's and runs its half of the handshake; both ranks have a
// 300 ms stall timeout and a 10 s connect timeout, and both must connect.
//
//   comm_connect_slow_test <tls>     tls: UCX_TLS for the ranks ("self,tcp" as between hosts)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "comm/bootstrap/file_store.h"
#include "comm/bootstrap/local_launcher.h"
#include "comm/errors.h"
#include "comm/ucx/ucx_communicator.h"
#include "comm/ucx/ucx_context.h"
#include "tests/comm/mp_check.h"

using namespace rf;
using namespace rf::comm;
using rf::comm::testing::g_failures;
using rf::comm::testing::g_rank;

namespace {

constexpr uint64_t kGeneration = 3;
constexpr auto kLate = std::chrono::milliseconds(1500);

// Delays every read of a peer's address by `late` once this rank's own is published: the
// peer meets a rank that is there but not yet talking.
class LateStore : public BootstrapStore {
 public:
  LateStore(BootstrapStore& inner, std::chrono::milliseconds late) : inner_(inner), late_(late) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_.set(key, value);
    published_ = true;
  }
  std::vector<uint8_t> wait_get(const std::string& key, std::chrono::milliseconds timeout) override {
    if (published_ && !slept_) {
      std::this_thread::sleep_for(late_);
      slept_ = true;
    }
    return inner_.wait_get(key, timeout);
  }

 private:
  BootstrapStore& inner_;
  std::chrono::milliseconds late_;
  bool published_ = false, slept_ = false;
};

int run_rank() {
  const RankEnv re = rank_env_from_environment();
  g_rank = re.rank;
  FileStore files(re.store_dir);
  LateStore late(files, kLate);
  BootstrapStore& store = re.rank == 1 ? static_cast<BootstrapStore&>(late) : files;
  auto ctx = UcxContext::create();
  UcxOptions o;
  o.stall_timeout = std::chrono::milliseconds(300);
  o.connect_timeout = std::chrono::milliseconds(10000);
  const TimePoint t = Clock::now();
  try {
    UcxCommunicator c(ctx, store, re.rank, re.world, kGeneration, o);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    std::cerr << "rank " << re.rank << ": connected after " << ms << " ms\n";
    if (re.rank == 0) EXPECT(ms >= 1000, "rank 0 connected after ", ms, " ms, before its peer was there");
  } catch (const CommError& e) {
    EXPECT(false, "connect failed (stall timeout 300 ms, connect timeout 10 s, peer 1.5 s late): ", e.what());
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
    std::cerr << "usage: comm_connect_slow_test <self,tcp | default>\n";
    return 2;
  }
  LocalLaunch l = rf::comm::testing::self_launch({argv[1]}, 2, std::chrono::seconds(30));
  if (std::string(argv[1]) != "default") l.env.push_back({"UCX_TLS", argv[1]});
  const int rc = rf::comm::testing::run_and_report(l, [](int) { return ""; });
  std::cerr << "comm_connect_slow_test " << argv[1] << ": " << (rc ? "FAILED" : "passed") << "\n";
  return rc;
}
