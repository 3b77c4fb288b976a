// --device and --backend: the flags' parsing, and the pure choice of the device a process
// computes on (models/device_choice.h) — by hand, and under `ringfence run` from the local
// rank, the local world and the GPUs of the host. Nothing here needs a GPU.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "models/device_choice.h"
#include "models/launch_env.h"
#include "models/train_flags.h"

using namespace rf;
using namespace rf::models;

namespace {

// The FlagError's text, or "" when parsing succeeded.
std::string flag_error(std::vector<std::string> args) {
  try {
    parse_train_flags(args, ModelKind::MLP);
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

std::string choice_error(const DeviceRequest& r) {
  try {
    choose_device(r);
  } catch (const FlagError& e) {
    return e.what();
  }
  return "";
}

DeviceRequest gpu_request(std::optional<LocalPlacement> local, int gpus, comm::Backend backend = comm::Backend::Ucx,
                          Device device = Device::CUDA, bool any_gpu = true) {
  return {.device = device, .any_gpu = any_gpu, .backend = backend, .gpus = gpus, .no_gpu_reason = "", .local = local,
          .nccl_share_gpu = false, .slot = 0, .incarnation = 0};
}

}  // namespace

TEST_CASE("--device and --backend set the options; cpu and ucx by default") {
  const TrainOptions d = parse_train_flags({}, ModelKind::MLP).options;
  CHECK(d.device == Device::CPU);
  CHECK_FALSE(d.any_gpu);
  CHECK(d.backend == comm::Backend::Ucx);

  const TrainOptions any = parse_train_flags({"--device", "cuda"}, ModelKind::MLP).options;
  CHECK(any.device == Device::cuda(0));
  CHECK(any.any_gpu);
  const TrainOptions named = parse_train_flags({"--device=cuda:3", "--backend", "nccl"}, ModelKind::CNN).options;
  CHECK(named.device == Device::cuda(3));
  CHECK_FALSE(named.any_gpu);
  CHECK(named.backend == comm::Backend::Nccl);
  CHECK(parse_train_flags({"--device", "cpu", "--backend=ucx"}, ModelKind::MLP).options.device == Device::CPU);
  // The last one given counts, as for every flag.
  CHECK_FALSE(parse_train_flags({"--device", "cuda", "--device", "cuda:0"}, ModelKind::MLP).options.any_gpu);
}

TEST_CASE("bad --device and --backend values are errors naming the flag") {
  CHECK(flag_error({"--device", "gpu"}) == "--device: 'gpu' is not cpu, cuda or cuda:N");
  CHECK(flag_error({"--device", "cuda:x"}) == "--device: 'cuda:x' is not cpu, cuda or cuda:N");
  CHECK(flag_error({"--device", "cuda:-1"}) == "--device: 'cuda:-1' is not cpu, cuda or cuda:N");
  CHECK(flag_error({"--device="}) == "--device: empty value");
  CHECK(flag_error({"--device"}) == "--device: missing value");
  CHECK(flag_error({"--backend", "mpi", "--device", "cuda"}) == "--backend: 'mpi' is not ucx or nccl");
  CHECK(flag_error({"--backend", "NCCL", "--device", "cuda"}) == "--backend: 'NCCL' is not ucx or nccl");
  // NCCL all-reduces device memory only.
  CHECK(flag_error({"--backend", "nccl"}) == "--backend nccl: needs a GPU (--device cuda or cuda:N)");
  CHECK(flag_error({"--backend", "nccl", "--device", "cpu"}) == "--backend nccl: needs a GPU (--device cuda or cuda:N)");
  CHECK(flag_error({"--backend", "nccl", "--device", "cuda"}).empty());
  CHECK(flag_error({"--backend", "ucx", "--device", "cuda:1"}).empty());
}

TEST_CASE("the help documents --device and --backend") {
  const std::string help = train_usage(ModelKind::MLP);
  CHECK(help.find("--device D") != std::string::npos);
  CHECK(help.find("cpu, cuda or cuda:N") != std::string::npos);
  CHECK(help.find("--backend B") != std::string::npos);
  CHECK(help.find("ucx or nccl") != std::string::npos);
}

TEST_CASE("by hand: cpu stays, cuda is cuda:0, cuda:N must exist") {
  CHECK(choose_device({}) == Device::CPU);
  CHECK(choose_device(gpu_request(std::nullopt, 2)) == Device::cuda(0));
  CHECK(choose_device(gpu_request(std::nullopt, 2, comm::Backend::Ucx, Device::cuda(1), false)) == Device::cuda(1));
  CHECK(choose_device(gpu_request(std::nullopt, 1, comm::Backend::Nccl)) == Device::cuda(0));
  CHECK(choice_error(gpu_request(std::nullopt, 2, comm::Backend::Ucx, Device::cuda(2), false)) ==
        "--device cuda:2: no such GPU on this machine (2 found: cuda:0 to cuda:1)");
  // The CPU needs no GPU, whatever the machine has.
  DeviceRequest cpu;
  cpu.no_gpu_reason = "this build has no CUDA";
  CHECK(choose_device(cpu) == Device::CPU);
  cpu.backend = comm::Backend::Nccl;
  CHECK(choice_error(cpu) ==
        "--backend nccl: needs a GPU (--device cuda or cuda:N)");
}

TEST_CASE("no GPU: the flag and CUDA's reason") {
  DeviceRequest r = gpu_request(std::nullopt, 0);
  r.no_gpu_reason = "this build has no CUDA (no nvcc was found when it was configured)";
  CHECK(choice_error(r) ==
        "--device cuda: no CUDA device to use (this build has no CUDA (no nvcc was found when it was configured))");
  r.no_gpu_reason = "cudaGetDeviceCount: cudaErrorNoDevice (no CUDA-capable device is detected)";
  r.device = Device::cuda(1);
  r.any_gpu = false;
  CHECK(choice_error(r) ==
        "--device cuda:1: no CUDA device to use (cudaGetDeviceCount: cudaErrorNoDevice (no CUDA-capable device is "
        "detected))");
  // Also under the launcher, before anything about local ranks.
  r.local = LocalPlacement{1, 4};
  CHECK(choice_error(r).find("no CUDA device to use") != std::string::npos);
}

TEST_CASE("under ringfence run: cuda is GPU (local rank mod GPUs), round-robin") {
  // One GPU per rank.
  for (int i = 0; i < 4; ++i) CHECK(choose_device(gpu_request(LocalPlacement{i, 4}, 4)) == Device::cuda(i));
  // More GPUs than ranks: the first ones.
  CHECK(choose_device(gpu_request(LocalPlacement{1, 2}, 8)) == Device::cuda(1));
  // More ranks than GPUs: shared round-robin (UCX).
  const int want[] = {0, 1, 0, 1, 0};
  for (int i = 0; i < 5; ++i) CHECK(choose_device(gpu_request(LocalPlacement{i, 5}, 2)) == Device::cuda(want[i]));
  CHECK(choose_device(gpu_request(LocalPlacement{3, 4}, 1)) == Device::cuda(0));
  // A named GPU is every local rank's.
  CHECK(choose_device(gpu_request(LocalPlacement{3, 4}, 2, comm::Backend::Ucx, Device::cuda(1), false)) ==
        Device::cuda(1));
  DeviceRequest cpu;
  cpu.local = LocalPlacement{2, 4};
  CHECK(choose_device(cpu) == Device::CPU);
}

TEST_CASE("NCCL refuses two ranks on one GPU") {
  CHECK(choose_device(gpu_request(LocalPlacement{1, 2}, 2, comm::Backend::Nccl)) == Device::cuda(1));
  CHECK(choose_device(gpu_request(LocalPlacement{0, 1}, 1, comm::Backend::Nccl)) == Device::cuda(0));
  CHECK(choice_error(gpu_request(LocalPlacement{0, 4}, 2, comm::Backend::Nccl)) ==
        "--backend nccl: NCCL refuses two ranks on one GPU: 4 ranks on this host share 2 GPU(s); use --backend ucx "
        "or fewer ranks per host");
  // Every rank says so, not only those that would land on a taken GPU.
  CHECK_FALSE(choice_error(gpu_request(LocalPlacement{1, 3}, 2, comm::Backend::Nccl)).empty());
  // One named GPU for every local rank: the same refusal, with the way out.
  CHECK(choice_error(gpu_request(LocalPlacement{0, 2}, 2, comm::Backend::Nccl, Device::cuda(1), false)) ==
        "--backend nccl: NCCL refuses two ranks on one GPU: 2 ranks on this host share 1 GPU(s); use --backend ucx "
        "or fewer ranks per host (or --device cuda for one GPU per rank)");
  CHECK(choose_device(gpu_request(LocalPlacement{0, 1}, 2, comm::Backend::Nccl, Device::cuda(1), false)) ==
        Device::cuda(1));
}

TEST_CASE("a launcher's placement that cannot be") {
  CHECK(choice_error(gpu_request(LocalPlacement{2, 2}, 2)).find("local rank 2 of 2") != std::string::npos);
  CHECK(choice_error(gpu_request(LocalPlacement{0, 0}, 2)).find("local rank 0 of 0") != std::string::npos);
}

TEST_CASE("RF_TEST_NCCL_SHARE_GPU=1: NCCL ranks share a GPU, each its own NCCL host, with a warning") {
  // Off by default: the refusal above stands, and nothing is set.
  DeviceRequest r = gpu_request(LocalPlacement{1, 3}, 1, comm::Backend::Nccl);
  r.slot = 1;
  CHECK(choice_error(r).find("--backend nccl: NCCL refuses two ranks on one GPU") == 0);
  r.nccl_share_gpu = true;
  const DeviceChoice c = decide_device(r);
  CHECK(c.device == Device::cuda(0));
  CHECK(c.warning ==
        "RF_TEST_NCCL_SHARE_GPU=1: 3 NCCL ranks share 1 GPU(s), each its own NCCL host "
        "(NCCL_HOSTID=ringfence-slot1-inc0) over loopback sockets: for correctness tests only, never for timing "
        "(docs/gpu.md)");
  using Env = std::vector<std::pair<std::string, std::string>>;
  CHECK(c.env == Env{{"NCCL_HOSTID", "ringfence-slot1-inc0"},
                     {"NCCL_P2P_DISABLE", "1"},
                     {"NCCL_SHM_DISABLE", "1"},
                     {"NCCL_NET", "Socket"},
                     {"NCCL_SOCKET_IFNAME", "lo"}});
  // Every process of the job is a host of its own: the slot and the incarnation name it.
  DeviceRequest again = r;
  again.incarnation = 2;  // slot 1's replacement
  CHECK(decide_device(again).env.front().second == "ringfence-slot1-inc2");
  again.slot = 7;
  again.incarnation = 0;
  CHECK(decide_device(again).env.front().second == "ringfence-slot7-inc0");
  CHECK(nccl_test_host_id(5, 3) == "ringfence-slot5-inc3");
  // A named GPU shared by every local rank: the same.
  DeviceRequest named = gpu_request(LocalPlacement{0, 2}, 2, comm::Backend::Nccl, Device::cuda(1), false);
  named.nccl_share_gpu = true;
  named.slot = 4;
  named.incarnation = 1;
  const DeviceChoice n = decide_device(named);
  CHECK(n.device == Device::cuda(1));
  CHECK(n.env.front() == std::pair<std::string, std::string>{"NCCL_HOSTID", "ringfence-slot4-inc1"});
  CHECK(n.warning.find("2 NCCL ranks share 1 GPU(s)") != std::string::npos);
}

TEST_CASE("the share override changes nothing where nothing is shared, and nothing but NCCL") {
  auto with_override = [](DeviceRequest r) {
    r.nccl_share_gpu = true;
    return decide_device(r);
  };
  // One rank per GPU: NCCL's own placement, no warning, nothing set.
  const DeviceChoice own = with_override(gpu_request(LocalPlacement{1, 2}, 2, comm::Backend::Nccl));
  CHECK(own.device == Device::cuda(1));
  CHECK(own.warning.empty());
  CHECK(own.env.empty());
  // UCX shares GPUs anyway; by hand there is one rank; the CPU has no GPU to share.
  const DeviceChoice ucx = with_override(gpu_request(LocalPlacement{2, 4}, 1));
  CHECK((ucx.device == Device::cuda(0) && ucx.warning.empty() && ucx.env.empty()));
  const DeviceChoice by_hand = with_override(gpu_request(std::nullopt, 1, comm::Backend::Nccl));
  CHECK((by_hand.device == Device::cuda(0) && by_hand.warning.empty() && by_hand.env.empty()));
  DeviceRequest cpu;
  cpu.local = LocalPlacement{1, 4};
  const DeviceChoice c = with_override(cpu);
  CHECK((c.device == Device::CPU && c.env.empty()));
  cpu.backend = comm::Backend::Nccl;
  cpu.nccl_share_gpu = true;
  CHECK(choice_error(cpu) == "--backend nccl: needs a GPU (--device cuda or cuda:N)");
  // No GPU at all is still an error.
  DeviceRequest none = gpu_request(LocalPlacement{0, 2}, 0, comm::Backend::Nccl);
  none.nccl_share_gpu = true;
  CHECK(choice_error(none).find("no CUDA device to use") != std::string::npos);
}

TEST_CASE("RF_TEST_NCCL_SHARE_GPU's values: 1 on; unset, empty or 0 off; anything else an error") {
  CHECK_FALSE(nccl_share_gpu_from(nullptr));
  CHECK_FALSE(nccl_share_gpu_from(""));
  CHECK_FALSE(nccl_share_gpu_from("0"));
  CHECK(nccl_share_gpu_from("1"));
  for (const char* bad : {"yes", "true", "2", " 1", "1 "}) {
    CAPTURE(bad);
    std::string why;
    try {
      nccl_share_gpu_from(bad);
    } catch (const FlagError& e) {
      why = e.what();
    }
    CHECK(why == std::string("RF_TEST_NCCL_SHARE_GPU='") + bad +
                     "' is not 0 or 1 (1: let NCCL ranks share a GPU, for tests)");
  }
}

TEST_CASE("a worker given a gpu_hang fault loads its CUDA modules eagerly; any other does not") {
  // main() sets CUDA_MODULE_LOADING=EAGER for it: a lazy load behind the kernel that never
  // ends would block its host thread, and the fault would not be the one it names.
  CHECK(injects_gpu_hang("gpu_hang:rank=1:step=5"));
  CHECK(injects_gpu_hang("kill:rank=0:step=3;gpu_hang:rank=2:step=9:phase=backward"));
  CHECK_FALSE(injects_gpu_hang(""));
  CHECK_FALSE(injects_gpu_hang("hang:rank=1:step=5;stop:rank=2:step=4"));
  CHECK_FALSE(injects_gpu_hang("gpu_hang:rank=x"));  // malformed: refused later, with its error
}
