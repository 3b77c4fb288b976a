#pragma once
// `ringfence timeline --html OUT.html TRACE.json` — a merged trace (trace_merge.h) as one
// self-contained page: inline SVG, CSS and a few lines of JS (wheel to zoom, drag to pan,
// double-click to reset), no external resource, so it opens with no network.
//
// One row per track (the coordinator, then each slot's incarnations and their buckets'
// all-reduces); nested spans stack downwards. Every element a test or a reader may look
// for carries data attributes:
//   g.track     data-pid data-tid data-kind (coordinator|train|allreduce) data-slot
//               data-incarnation data-first-us data-last-us [data-exit-status]
//   rect.span   data-name data-step data-g data-rank data-slot data-incarnation
//               [data-bucket] data-ts-us data-dur-us
//   g.instant   data-name data-ts-us (+ the span's data-* it has) [data-status]
// Times are microseconds from the trace's first event.
#include <string>

namespace rf::apps {

// Returns 0, or prints why and returns non-zero (unreadable input, unwritable output).
int write_timeline_html(const std::string& trace_path, const std::string& out_path);

}  // namespace rf::apps
