#pragma once
// FileStore — a BootstrapStore in a directory shared by the ranks (one machine, or a shared
// file system). set() writes a temporary file and rename()s it into place, so a reader sees
// either nothing or the whole value. '/' in keys is escaped, so keys map to flat names.
#include "comm/bootstrap/bootstrap_store.h"

namespace rf::comm {

class FileStore : public BootstrapStore {
 public:
  explicit FileStore(std::string dir);  // creates the directory if needed
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> wait_get(const std::string& key, std::chrono::milliseconds timeout) override;
  const std::string& dir() const { return dir_; }

 private:
  std::string path_of(const std::string& key) const;
  std::string dir_;
};

}  // namespace rf::comm
