#include "comm/bootstrap/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/str.h"
#include "comm/errors.h"

namespace rf::comm {

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw rf::InvalidInput("FileStore: empty directory name");
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    throw rf::InvalidInput(rf::str("FileStore: cannot create directory '", dir_, "': ", std::strerror(errno)));
  }
}

std::string FileStore::path_of(const std::string& key) const {
  if (key.empty()) throw rf::InvalidInput("FileStore: empty key");
  std::string name;
  for (char c : key) {
    if (c == '/') name += "%2F";
    else if (c == '%') name += "%25";
    else name += c;
  }
  return dir_ + "/" + name;
}

void FileStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = path_of(key);
  // The temporary name is unique per process and call; rename() is atomic on POSIX.
  const std::string tmp = rf::str(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
    if (!out) throw rf::InvalidInput(rf::str("FileStore: cannot write '", tmp, "'"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw rf::InvalidInput(rf::str("FileStore: cannot rename to '", path, "': ", std::strerror(e)));
  }
}

std::vector<uint8_t> FileStore::wait_get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string path = path_of(key);
  const auto deadline = rf::Clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
    if (rf::Clock::now() >= deadline) {
      CommErrorInfo i;
      i.collective = "bootstrap";
      i.cause = rf::str("key '", key, "' not set within ", timeout.count(), " ms in ", dir_);
      throw TimedOut(i);
    }
    // Polling a directory: back off to 10 ms so waiting ranks do not steal the CPU.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

}  // namespace rf::comm
