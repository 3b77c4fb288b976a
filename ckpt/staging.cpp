#include "ckpt/staging.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "base/str.h"

namespace rf::ckpt {
namespace fs = std::filesystem;

const char* to_string(StagingVerdict v) { return name_of(kStagingVerdictNames, v); }

StagingPlan plan_staging(const StagingInput& in) {
  StagingPlan plan;
  if (!out_of_space(in.err)) return plan;
  const uint64_t block = in.block > 0 ? in.block : 1;
  const auto blocks = [&](uint64_t n) { return (n + block - 1) / block * block; };
  uint64_t have = in.available;
  for (const auto& f : in.on_disk)
    if (f.file.step < in.step) {
      plan.remove.push_back(f.file);
      have += blocks(f.bytes);
    }
  if (plan.remove.empty()) {
    plan.verdict = StagingVerdict::NothingOlder;
  } else if (have < blocks(in.bytes) + block) {  // one block spare for the temp file's metadata
    plan.verdict = StagingVerdict::TooSmall;
    plan.remove.clear();
  } else {
    plan.verdict = StagingVerdict::Stage;
  }
  return plan;
}

StagingInput staging_input(const std::string& dir, int err, int64_t step, uint64_t bytes, const StorageFault& fault) {
  StagingInput in;
  in.err = err;
  in.step = step;
  in.bytes = bytes;
  struct statvfs st {};
  if (!out_of_space(fault.err) && ::statvfs(dir.c_str(), &st) == 0) {
    in.available = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    in.block = st.f_frsize;
  }
  for (auto& f : list_checkpoints(dir)) {
    std::error_code ec;
    const auto n = fs::file_size(f.path, ec);
    in.on_disk.push_back({std::move(f), ec ? 0 : static_cast<uint64_t>(n)});
  }
  return in;
}

std::string write_staged(const std::string& dir, const std::string& staging_dir, int64_t step,
                         std::span<const std::byte> image, const StagingPlan& plan, const StorageFault& fault,
                         const PartialWriteHook& hook, std::string& note) {
  std::string where = (fs::path(staging_dir) / "ringfence-ckpt-XXXXXX").string();
  if (::mkdtemp(where.data()) == nullptr)
    throw StorageError(staging_dir, StorageOp::Create, errno, "(the staging directory for the final checkpoint)");
  std::string staged;
  try {
    staged = write_checkpoint_file(where, step, image);
  } catch (const StorageError& e) {
    std::error_code ec;
    fs::remove_all(where, ec);
    throw StorageError(e.path(), e.op(), e.err(), "(staging the final checkpoint)");
  }
  note += rf::str("ckpt: step ", step, "'s checkpoint does not fit next to the older ones in ", dir,
                  ": staged it as ", staged, "\n");
  for (const auto& v : plan.remove) {
    std::error_code ec;
    if (fs::remove(v.path, ec)) note += rf::str("ckpt: removed ", v.path, " (step ", step, " is staged)\n");
  }
  std::string path;
  try {
    path = write_checkpoint_file(dir, step, image, hook, fault);
  } catch (const StorageError& e) {
    throw StagedOnly(rf::str(e.what(), " (after staging); the final checkpoint stays at ", staged,
                             ": move it into ", dir, " to resume from it"),
                     staged);
  }
  std::error_code ec;
  fs::remove_all(where, ec);
  note += rf::str("ckpt: moved the staged checkpoint of step ", step, " into ", dir, "\n");
  return path;
}

}  // namespace rf::ckpt
