#pragma once
// The launcher's run directory (docs/launcher.md, "Output"): where its workers write their
// flight records when a generation fails (RINGFENCE_RUN_DIR), so a post-mortem never goes
// through a terminal or pipe that may not be read. `--run-dir DIR`, or a fresh
// ringfence-run-XXXXXX beside the event log (else in TMPDIR or /tmp); a directory the
// launcher made and nothing was written to is removed at the end.
#include <string>

namespace rf::apps {

struct RunDir {
  std::string path;   // "" : none could be made (workers then write records to stderr)
  bool made = false;  // made by this launcher: removed at the end when empty
};

// `wanted` is --run-dir; `event_log` is --event-log. Throws rf::Error when `wanted` cannot be made.
RunDir make_run_dir(const std::string& wanted, const std::string& event_log);

// At the end: the number of files in it (0 and `made`: the directory is removed).
int finish_run_dir(const RunDir& d);

}  // namespace rf::apps
