#include "apps/ringfence/trace_merge.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>

#include "base/error.h"
#include "base/log.h"
#include "base/str.h"
#include "elastic/membership_types.h"

namespace rf::apps {

using nlohmann::json;

std::string trace_parts_dir(const std::string& trace_path) { return trace_path + ".parts"; }

std::string trace_part_path(const std::string& trace_path, int slot, int64_t incarnation) {
  return str(trace_parts_dir(trace_path), "/slot", slot, ".inc", incarnation, ".jsonl");
}

std::string trace_coordinator_part(const std::string& trace_path) {
  return trace_parts_dir(trace_path) + "/coordinator.jsonl";
}

void prepare_trace_parts(const std::string& trace_path) {
  namespace fs = std::filesystem;
  const fs::path dir = trace_parts_dir(trace_path);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InvalidInput(str("--trace ", trace_path, ": cannot create ", dir.string(), ": ", ec.message()));
  // An earlier run's parts would merge into this one (the event log is appended to).
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".jsonl") fs::remove(e.path(), ec);
}

void remove_trace_parts(const std::string& trace_path) {
  std::error_code ec;
  std::filesystem::remove_all(trace_parts_dir(trace_path), ec);
}

namespace {

json meta(const char* what, int pid, std::optional<int64_t> tid, const json& args) {
  json m = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", args}};
  if (tid) m["tid"] = *tid;
  return m;
}

// Each line one object; a line that does not parse (the partial last line of a killed
// worker) is counted and skipped.
template <class F>
void read_lines(const std::string& path, int64_t& skipped, F&& take) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    json e = json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object()) {
      ++skipped;
      continue;
    }
    take(std::move(e));
  }
}

// One worker incarnation's file: its events move to the slot's pid and the incarnation's
// tids. Returns false when there is no file.
bool merge_worker(const std::string& path, int slot, int64_t inc, json& events, std::map<int64_t, int>& lanes,
                  int64_t& skipped) {
  if (!std::filesystem::exists(path)) return false;
  read_lines(path, skipped, [&](json e) {
    const int lane = e.value("tid", 0);
    lanes[lane] += 1;
    e["pid"] = trace_pid(slot);
    e["tid"] = trace_tid(inc, lane);
    if (e.contains("args") && e["args"].is_object()) e["args"]["slot"] = slot, e["args"]["incarnation"] = inc;
    events.push_back(std::move(e));
  });
  return true;
}

// The coordinator's event log: every line an instant; each recovery a span "recovery" from
// the first revocation to the generation that then runs (a failure during recovery
// revokes again: one span covers the whole episode), with the first revocation's cause.
void merge_coordinator(const std::string& path, int64_t since_us, json& events, int64_t& skipped) {
  std::optional<std::pair<int64_t, json>> episode;  // (ts, cause) of its first revocation
  read_lines(path, skipped, [&](json line) {
    if (!line.contains("ts_us") || !line["ts_us"].is_number_integer()) {
      ++skipped;
      return;
    }
    const int64_t ts = line["ts_us"].get<int64_t>();
    if (ts < since_us) return;  // an earlier run's, in an appended log
    const std::string name = line.value("event", "?");
    json args = line;
    args.erase("ts_us");
    args.erase("event");
    events.push_back({{"name", name}, {"ph", "i"}, {"s", "t"}, {"ts", ts}, {"pid", kCoordinatorPid}, {"tid", 0},
                      {"args", args}});
    // Not every line is a membership transition (listening, commit, ...): nullopt then.
    const std::optional<elastic::TransitionEvent> event = elastic::parse_transition_event(name);
    if (event == elastic::TransitionEvent::Revoke && !episode) episode = {ts, line.value("cause", json(""))};
    if (event == elastic::TransitionEvent::Running && episode) {
      const json rargs = {{"g", line.value("g", json(-1))}, {"target_step", line.value("s", json(-1))},
                          {"cause", episode->second}};
      events.push_back({{"name", "recovery"}, {"ph", "X"}, {"ts", episode->first}, {"dur", ts - episode->first},
                        {"pid", kCoordinatorPid}, {"tid", 0}, {"args", rargs}});
      episode.reset();
    }
  });
}

// A step that some worker began and nobody applied then (a "failed step", or one a worker
// died inside: its forward or backward without its "step") is redone after the recovery:
// each later "step" of it is renamed "redo". Only the merge sees every worker, so only it
// can tell a redone step from a new one (after a planned grow, T+1 was never begun).
void mark_redone_steps(json& events) {
  std::map<int64_t, int64_t> begun;  // step -> when it was first begun and not applied
  std::map<std::tuple<int, int64_t, int64_t>, bool> applied;  // (pid, tid, step)
  auto step_of = [](const json& e) { return e.contains("args") ? e["args"].value("step", int64_t{-1}) : -1; };
  auto key = [&](const json& e) { return std::tuple{e.value("pid", 0), e.value("tid", int64_t{0}), step_of(e)}; };
  for (const json& e : events)
    if (e.value("name", "") == "step") applied[key(e)] = true;
  for (const json& e : events) {
    const std::string name = e.value("name", "");
    const bool part = name == "forward" || name == "backward" || name == "allreduce wait";
    const bool unapplied_part = part && !applied.count(key(e));
    if (name != "failed step" && !unapplied_part) continue;
    const int64_t ts = e.value("ts", int64_t{0});
    auto [it, fresh] = begun.emplace(step_of(e), ts);
    if (!fresh) it->second = std::min(it->second, ts);
  }
  for (json& e : events) {
    if (e.value("name", "") != "step") continue;
    auto it = begun.find(step_of(e));
    if (it != begun.end() && e.value("ts", int64_t{0}) > it->second) e["name"] = "redo";
  }
}

}  // namespace

TraceMergeResult merge_trace(const TraceMergeInput& in) {
  TraceMergeResult r;
  json events = json::array();
  json metadata = json::array();
  if (!in.coordinator_log.empty() && std::filesystem::exists(in.coordinator_log)) {
    merge_coordinator(in.coordinator_log, in.since_us, events, r.skipped_lines);
    metadata.push_back(meta("process_name", kCoordinatorPid, std::nullopt, {{"name", "coordinator"}}));
    metadata.push_back(meta("process_sort_index", kCoordinatorPid, std::nullopt, {{"sort_index", kCoordinatorPid}}));
    metadata.push_back(meta("thread_name", kCoordinatorPid, 0, {{"name", "events"}}));
  }
  for (const json& w : in.workers) {
    const int slot = w.value("slot", -1);
    const int pid = trace_pid(slot);
    metadata.push_back(meta("process_name", pid, std::nullopt, {{"name", str("slot ", slot)}}));
    metadata.push_back(meta("process_sort_index", pid, std::nullopt, {{"sort_index", pid}}));
    for (const json& sp : w.value("spawns", json::array())) {
      const int64_t inc = sp.value("incarnation", int64_t{0});
      std::map<int64_t, int> lanes;
      if (!merge_worker(trace_part_path(in.trace_path, slot, inc), slot, inc, events, lanes, r.skipped_lines))
        ++r.missing_parts;
      lanes[0] += 0;  // the incarnation's own track exists even without a file: its spawn and exit are on it
      for (const auto& [lane, n] : lanes) {
        const int64_t tid = trace_tid(inc, static_cast<int>(lane));
        const std::string name =
            lane == 0 ? str("incarnation ", inc) : str("incarnation ", inc, " allreduce bucket ", lane - 1);
        metadata.push_back(meta("thread_name", pid, tid, {{"name", name}}));
        metadata.push_back(meta("thread_sort_index", pid, tid, {{"sort_index", tid}}));
      }
      const json sargs = {{"slot", slot}, {"incarnation", inc}, {"reason", sp.value("reason", "")}};
      events.push_back({{"name", "spawn"}, {"ph", "i"}, {"s", "t"}, {"ts", sp.value("wall_us", int64_t{0})},
                        {"pid", pid}, {"tid", trace_tid(inc, 0)}, {"args", sargs}});
    }
    for (const json& ex : w.value("exits", json::array())) {
      const int64_t inc = ex.value("incarnation", int64_t{0});
      const json eargs = {{"slot", slot}, {"incarnation", inc}, {"status", ex.value("status", 0)}};
      events.push_back({{"name", "exit"}, {"ph", "i"}, {"s", "t"}, {"ts", ex.value("wall_us", int64_t{0})},
                        {"pid", pid}, {"tid", trace_tid(inc, 0)}, {"args", eargs}});
    }
  }
  mark_redone_steps(events);
  std::stable_sort(events.begin(), events.end(), [](const json& a, const json& b) {
    return a.value("ts", int64_t{0}) < b.value("ts", int64_t{0});
  });
  r.events = static_cast<int64_t>(events.size());
  json out = {{"displayTimeUnit", "ms"},
              {"otherData", {{"clock", "wall-clock microseconds since the Unix epoch (one host)"},
                             {"skipped_lines", r.skipped_lines}}},
              {"traceEvents", json::array()}};
  for (auto& m : metadata) out["traceEvents"].push_back(std::move(m));
  for (auto& e : events) out["traceEvents"].push_back(std::move(e));
  std::ofstream f(in.trace_path);
  f << out.dump() << "\n";
  if (!f) throw Error(str("cannot write the trace '", in.trace_path, "'"));
  return r;
}

std::string coordinator_event_log(const rf::elastic::RunOptions& o) {
  if (!o.event_log.empty() || o.trace.empty()) return o.event_log;
  return trace_coordinator_part(o.trace);
}

void write_job_trace(const rf::elastic::RunOptions& o, const json& workers, int64_t since_us) {
  try {
    // A remote coordinator (--coord, --etcd) writes its log on its own machine: no coordinator track.
    const bool embedded = o.coord.empty() && o.etcd.empty();
    const TraceMergeResult r = merge_trace({.trace_path = o.trace,
                                            .coordinator_log = embedded ? coordinator_event_log(o) : "",
                                            .since_us = since_us,
                                            .workers = workers});
    remove_trace_parts(o.trace);
    std::string note;
    if (r.skipped_lines) note += str(", ", r.skipped_lines, " partial line(s) skipped");
    if (r.missing_parts) note += str(", ", r.missing_parts, " incarnation(s) left no spans");
    rf::log::info("run", "trace written to ", o.trace, " (", r.events, " events", note, ")");
  } catch (const Error& e) {
    rf::log::error("run", "--trace ", o.trace, ": ", e.what());
  }
}

}  // namespace rf::apps
