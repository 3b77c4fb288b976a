// comm_ucx_teardown_test — a UcxTransport whose endpoint close is still in progress at its
// deadline is destroyed cleanly. A UcxCommunicator's destructor flush-closes its endpoints,
// bounded; on a lossy link, or to a peer that stopped driving its worker, the flush
// outlasts the bound. A close request the transport never handed back made
// ucp_worker_destroy abort (UCX asserts UCP_REQUEST_FLAG_RELEASED): workers died with
// SIGABRT after their leave, turning a finished job into exit 1.
//
// One process, two transports on one context: rank 0 starts a 4 MiB send (a rendezvous:
// it needs rank 1's worker to run), rank 1 never progresses, rank 0 flush-closes with a
// deadline already passed and is destroyed. Exit 0 when that process lives to the end.
#include <iostream>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "comm/ucx/ucx_context.h"
#include "comm/ucx/ucx_transport.h"
#include "tests/comm/mp_check.h"

using namespace rf::comm;

int main() {
  rf::comm::testing::g_rank = 0;
  auto context = UcxContext::create();
  auto sender = std::make_unique<UcxTransport>(context, 0, 2);
  auto stuck = std::make_unique<UcxTransport>(context, 1, 2);  // never progressed
  const std::vector<std::vector<uint8_t>> addresses{sender->address(), stuck->address()};
  sender->connect(addresses);
  stuck->connect(addresses);

  std::vector<char> data(4u << 20, 1);
  Transfer send;
  sender->post_send(send, 1, data.data(), data.size(), /*tag=*/42);
  for (int i = 0; i < 100; ++i) sender->progress();
  // What makes this a reproduction: the send, and so the flush, waits on the stuck peer.
  EXPECT(!sender->test(send), "the send finished without its peer: the flush below would not hang");

  sender->close_endpoints(/*force=*/false, rf::Clock::now());  // the bound is already past
  // The send stays in progress (UCX warns that its request was not returned): a healthy
  // communicator has none left at its end; only the close request matters here.
  sender.reset();  // aborted here (SIGABRT) while the close request was never handed back
  stuck.reset();
  std::cerr << "the transport with a close in progress was destroyed cleanly\n";
  return rf::comm::testing::g_failures != 0;
}
