#pragma once
// `ringfence run --trace FILE`: every worker writes its own spans (base/trace.h) to
// FILE.parts/slot<S>.inc<I>.jsonl, the path the launcher gives it in RINGFENCE_TRACE; the
// embedded coordinator writes its event log there too (coordinator.jsonl, unless
// --event-log names another file). When the job ends the launcher merges them into FILE:
// one Chrome trace (the JSON Perfetto and chrome://tracing open) on one clock, wall-clock
// microseconds since the epoch (every process of `ringfence run` is on one host).
//
// Tracks: pid 1 is the coordinator (its events as instants, and each recovery as a span
// from the revocation to the new generation RUNNING); pid 2+S is slot S, one thread per
// incarnation ("incarnation I", tid 100*I) with one thread per gradient bucket's
// all-reduces beside it (tid 100*I + 1 + b), all named by metadata events. The launcher's
// own view of each incarnation (spawned, exited with its status) is added as instants.
// A step begun and not applied before a recovery is redone after it: each later "step" of
// it is renamed "redo" (only the merge sees every worker, so only it can tell).
//
// A killed worker's file may end in a partial line: lines that do not parse are skipped
// and counted, never fatal.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "elastic/launch_options.h"

namespace rf::apps {

std::string trace_parts_dir(const std::string& trace_path);
std::string trace_part_path(const std::string& trace_path, int slot, int64_t incarnation);
std::string trace_coordinator_part(const std::string& trace_path);
// Before the workers start: FILE.parts/ exists and holds no earlier run's parts. Throws
// rf::InvalidInput when it cannot be made.
void prepare_trace_parts(const std::string& trace_path);
// After a merge: the parts go (FILE holds everything).
void remove_trace_parts(const std::string& trace_path);

// Track numbering of the merged file.
constexpr int kCoordinatorPid = 1;
constexpr int trace_pid(int slot) { return 2 + slot; }
constexpr int64_t trace_tid(int64_t incarnation, int lane) { return 100 * incarnation + lane; }

struct TraceMergeInput {
  std::string trace_path;          // FILE: the parts are read from FILE.parts/
  std::string coordinator_log;     // the coordinator's event log ("" = none)
  int64_t since_us = 0;            // older lines of an appended event log are left out
  nlohmann::json workers;          // the launcher's summary "workers": slot, spawns, exits
};

struct TraceMergeResult {
  int64_t events = 0;
  int64_t skipped_lines = 0;       // partial or unreadable lines (a killed worker's last)
  int missing_parts = 0;           // incarnations that left no file (died before tracing)
};

// Writes input.trace_path; throws rf::Error when it cannot be written.
TraceMergeResult merge_trace(const TraceMergeInput& input);

// The launcher's side. The event log the embedded coordinator writes: --event-log, else
// with --trace the parts' coordinator.jsonl.
std::string coordinator_event_log(const rf::elastic::RunOptions& o);
// At the job's end: merges, removes the parts, says where the trace is. A failure is
// printed and leaves the job's exit status alone.
void write_job_trace(const rf::elastic::RunOptions& o, const nlohmann::json& workers, int64_t since_us);

}  // namespace rf::apps
