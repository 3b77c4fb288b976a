#include "apps/ringfence/run_dir.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "base/log.h"
#include "base/str.h"

namespace rf::apps {

namespace fs = std::filesystem;

RunDir make_run_dir(const std::string& wanted, const std::string& event_log) {
  if (!wanted.empty()) {
    std::error_code ec;
    fs::create_directories(wanted, ec);
    if (ec || !fs::is_directory(wanted)) throw rf::Error(rf::str("--run-dir ", wanted, ": ", ec ? ec.message() : "not a directory"));
    return {fs::absolute(wanted).string(), false};
  }
  std::string base;
  if (!event_log.empty()) base = fs::absolute(event_log).parent_path().string();
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp && *tmp ? tmp : "/tmp";
  }
  std::string tmpl = rf::str(base, "/ringfence-run-XXXXXX");
  if (!::mkdtemp(tmpl.data())) {
    rf::log::warn("run", "cannot make a run directory in ", base, "; flight records go to the workers' stderr");
    return {};
  }
  return {tmpl, true};
}

int finish_run_dir(const RunDir& d) {
  if (d.path.empty()) return 0;
  std::error_code ec;
  int files = 0;
  for (auto it = fs::directory_iterator(d.path, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) ++files;
  if (files == 0 && d.made) fs::remove(d.path, ec);
  return files;
}

}  // namespace rf::apps
