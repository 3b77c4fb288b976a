#pragma once
// `ringfence timeline EVENTS.jsonl` — prints the coordinator's event log as a timeline
// relative to its first line, one event per line, so a failure and its recovery can be
// read at a glance (detection, revocation, reports, plan, ready barrier, running).
#include <string>

namespace rf::apps {

int print_timeline(const std::string& path);

}  // namespace rf::apps
