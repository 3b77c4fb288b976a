#include "ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/str.h"

namespace rf::ckpt {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".safetensors";
constexpr std::string_view kTempSuffix = ".tmp";

std::string errno_str() { return std::strerror(errno); }

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw StorageError(dir, StorageOp::SyncDir, errno, "(open)");
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw StorageError(dir, StorageOp::SyncDir, saved);
}

void write_all(int fd, const std::byte* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw StorageError(path, StorageOp::Write, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ckpt-%09lld.safetensors", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> parse_checkpoint_name(std::string_view name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.substr(0, kPrefix.size()) != kPrefix ||
      name.substr(name.size() - kSuffix.size()) != kSuffix)
    return std::nullopt;
  const std::string_view digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

std::vector<CheckpointFile> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    // Missing is empty; unreachable (a permission, an I/O error) is not.
    if (ec) throw rf::Error(rf::str(dir, ": cannot list: ", ec.message()));
    return out;
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (auto step = parse_checkpoint_name(name)) out.push_back({*step, entry.path().string()});
  }
  if (ec) throw rf::Error(rf::str(dir, ": cannot list: ", ec.message()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
  return out;
}

CheckpointLock::CheckpointLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw rf::Error(rf::str("--ckpt-dir ", dir, ": cannot create: ", ec.message()));
  const std::string path = (fs::path(dir) / "ckpt.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw rf::Error(rf::str(path, ": cannot open the lock file: ", errno_str()));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int saved = errno;
    char holder[32] = {0};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (saved == EWOULDBLOCK) {
      throw CheckpointLocked(rf::str(dir, ": another checkpoint writer holds ", path,
                                     n > 0 ? rf::str(" (pid ", std::string(holder, static_cast<size_t>(n)), ")") : "",
                                     "; one writer per job"));
    }
    throw rf::Error(rf::str(path, ": flock failed: ", std::strerror(saved)));
  }
  // The holder's pid, for the message above (informational only: the flock is the lock).
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

std::string write_checkpoint_file(const std::string& dir, int64_t step, std::span<const std::byte> image,
                                  const PartialWriteHook& hook, const StorageFault& fault) {
  const std::string final_path = (fs::path(dir) / checkpoint_name(step)).string();
  const std::string temp_path = (fs::path(dir) / rf::str(".", checkpoint_name(step), kTempSuffix)).string();
  if (fault.delay.count() > 0) std::this_thread::sleep_for(fault.delay);
  // An injected fault fails the call a real disk fails with its errno (storage_error.h).
  const std::optional<StorageOp> fail_at = fault.err ? std::optional(storage_fault_op(fault.err)) : std::nullopt;
  const auto injected = [&](StorageOp op) {
    if (fail_at == op) throw StorageError(temp_path, op, fault.err);
  };
  injected(StorageOp::Create);
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw StorageError(temp_path, StorageOp::Create, errno);
  try {
    size_t done = 0;
    if (hook || fail_at == StorageOp::Write) {
      done = image.size() / 2;
      write_all(fd, image.data(), done, temp_path);
      injected(StorageOp::Write);  // a disk that fills up half-way
      if (::fsync(fd) != 0) throw StorageError(temp_path, StorageOp::Fsync, errno);
      if (hook) hook(temp_path, done, image.size());
    }
    write_all(fd, image.data() + done, image.size() - done, temp_path);
    // The data must be on disk before the rename makes it visible under the final name.
    injected(StorageOp::Fsync);
    if (::fsync(fd) != 0) throw StorageError(temp_path, StorageOp::Fsync, errno);
  } catch (...) {
    ::close(fd);
    ::unlink(temp_path.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int saved = errno;
    ::unlink(temp_path.c_str());
    throw StorageError(temp_path, StorageOp::Close, saved);
  }
  if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temp_path.c_str());
    throw StorageError(final_path, StorageOp::Rename, saved, rf::str("from ", temp_path));
  }
  try {
    fsync_dir(dir);  // makes the rename itself durable
  } catch (const StorageError&) {
    // Not durable: no checkpoint of this step is promised, so none is left to be found
    // (prune counts files, and a later resume would trust it).
    ::unlink(final_path.c_str());
    throw;
  }
  return final_path;
}

std::vector<std::string> remove_stale_temps(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return removed;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    // ".ckpt-<step>.safetensors.tmp": a checkpoint name between a dot and the suffix.
    const std::string name = entry.path().filename().string();
    const bool temp = name.size() > 1 + kTempSuffix.size() && name[0] == '.' &&
                      name.compare(name.size() - kTempSuffix.size(), kTempSuffix.size(), kTempSuffix) == 0 &&
                      parse_checkpoint_name(name.substr(1, name.size() - 1 - kTempSuffix.size()));
    if (temp) {
      std::error_code rm;
      if (fs::remove(entry.path(), rm)) removed.push_back(entry.path().string());
    }
  }
  return removed;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep, int64_t newest) {
  std::vector<std::string> removed;
  int64_t kept = 0;
  for (const auto& f : list_checkpoints(dir)) {  // newest first
    const bool stale = f.step > newest;
    if (!stale && kept < keep) {
      ++kept;
      continue;
    }
    std::error_code ec;
    if (fs::remove(f.path, ec)) removed.push_back(f.path);
    else if (ec) throw rf::Error(rf::str(f.path, ": cannot remove: ", ec.message()));
  }
  return removed;
}

std::vector<CheckpointFile> room_to_make(int err, int64_t newest_durable, const std::vector<CheckpointFile>& on_disk) {
  std::vector<CheckpointFile> out;
  if (!out_of_space(err) || newest_durable < 0) return out;
  const bool durable_here =
      std::any_of(on_disk.begin(), on_disk.end(), [&](const CheckpointFile& f) { return f.step == newest_durable; });
  if (!durable_here) return out;
  for (const auto& f : on_disk)
    if (f.step < newest_durable) out.push_back(f);
  return out;
}

}  // namespace rf::ckpt
