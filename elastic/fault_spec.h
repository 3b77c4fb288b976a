#pragma once
// Fault specifications: one grammar for the launcher's --inject and the trainer's
// injection points:
//   KIND:rank=R:step=S[:phase=P][:after_chunks=K]     executed inside the worker
//   slow:rank=R:step=S[:phase=P][:after_chunks=K][:factor=F][:steps=N]
//   KIND:rank=R:at=SECONDS                              executed by the launcher,
//                                                       SECONDS after the job first runs
//   disk:rank=0:step=S[:error=E][:delay=SECONDS][:writes=N]   at the checkpoint writer
//   gpu_hang:rank=R:step=S[:phase=P]                   the worker's GPU gets stuck
//   stop:rank=R:step=S[:phase=P]:for=SECONDS           the worker's process freezes for
//                                                       SECONDS, then goes on
// KIND is kill|stop|hang|exit|drop|slow|disk|gpu_hang; P is forward|backward|allreduce|
// optimizer|transfer|recovery|leave (leave: after the job's last step S, before the
// worker's leave is sent). A slow rank delays each of the N steps from S (default 1) by
// (F - 1) x its own median recent step time, or by a fixed 200 ms without factor=
// (ddp/fault_injector.h). A disk fault strikes the first N (default 1) checkpoint writes of
// a step >= S by rank 0 (the writer): each waits SECONDS (a slow disk) and, with error=E
// (ENOSPC|EIO|EROFS|EDQUOT), fails as a disk would (ckpt/storage_error.h); one of error= or
// delay= is required. gpu_hang enqueues a kernel that never ends on the rank's compute
// stream (its host thread goes on; its next NCCL all-reduce never starts on its GPU); only
// a worker computing on a GPU takes it (refuse_gpu_faults_on_cpu). Several specs travel
// A stop with for= is a freeze, not a failure (a VM paused by its host, a debugger, a
// job-control stop): a helper child continues the process after SECONDS, and a freeze
// shorter than the lease must cost nothing (no eviction, no recovery). Several specs travel
// in RINGFENCE_INJECT separated by ';'.
// A malformed spec throws rf::InvalidInput naming the spec and what is wrong, so the
// launcher can refuse it before anything starts.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/enum_names.h"

namespace rf::elastic {

enum class FaultKind { Kill, Stop, Hang, Exit, Drop, Slow, Disk, GpuHang };
inline constexpr EnumName<FaultKind> kFaultKindNames[] = {
    {FaultKind::Kill, "kill"}, {FaultKind::Stop, "stop"}, {FaultKind::Hang, "hang"}, {FaultKind::Exit, "exit"},
    {FaultKind::Drop, "drop"}, {FaultKind::Slow, "slow"}, {FaultKind::Disk, "disk"}, {FaultKind::GpuHang, "gpu_hang"},
};
static_assert(lists_each_once(kFaultKindNames));
enum class FaultPhase { Forward, Backward, Allreduce, Optimizer, Transfer, Recovery, Leave };
inline constexpr EnumName<FaultPhase> kFaultPhaseNames[] = {
    {FaultPhase::Forward, "forward"},     {FaultPhase::Backward, "backward"}, {FaultPhase::Allreduce, "allreduce"},
    {FaultPhase::Optimizer, "optimizer"}, {FaultPhase::Transfer, "transfer"}, {FaultPhase::Recovery, "recovery"},
    {FaultPhase::Leave, "leave"},
};
static_assert(lists_each_once(kFaultPhaseNames));

struct FaultSpec {
  FaultKind kind = FaultKind::Kill;
  int rank = 0;
  std::optional<int64_t> step;          // worker-side trigger
  std::optional<FaultPhase> phase;      // only with step
  std::optional<int64_t> after_chunks;  // only with step
  std::optional<double> at_seconds;     // launcher-side trigger
  std::optional<double> factor;         // slow only: a step takes factor x its usual time
  std::optional<int64_t> steps;         // slow only: consecutive steps slowed from step
  std::optional<int> error;             // disk only: the errno the checkpoint writes fail with
  std::optional<double> delay_s;        // disk only: each write waits this long first
  std::optional<int64_t> writes;        // disk only: how many checkpoint writes it strikes (1)
  std::optional<double> for_s;          // stop with step= only: continued after this long

  bool launcher_side() const { return at_seconds.has_value(); }
  std::string to_string() const;  // canonical text; parse(to_string()) == *this
  bool operator==(const FaultSpec&) const = default;
};

FaultSpec parse_fault_spec(const std::string& text);
// Parses a ';'-separated list (empty parts are not allowed, an empty string is no specs).
std::vector<FaultSpec> parse_fault_specs(const std::string& text);
std::string join_fault_specs(const std::vector<FaultSpec>& specs);

const char* to_string(FaultKind k);
const char* disk_error_name(int err);  // "ENOSPC" for ENOSPC, ... ("?" for another errno)
const char* to_string(FaultPhase p);

// Kinds that act on the worker's GPU (gpu_hang). A worker that computes on the CPU refuses
// them before it starts: rf::InvalidInput naming the first such spec (they mean nothing there).
bool needs_gpu(FaultKind k);
void refuse_gpu_faults_on_cpu(const std::vector<FaultSpec>& specs);

}  // namespace rf::elastic
