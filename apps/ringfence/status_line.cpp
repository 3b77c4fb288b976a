#include "apps/ringfence/status_line.h"

#include <unistd.h>

#include <cstdio>

#include "base/log.h"
#include "base/output_pump.h"
#include "base/str.h"

namespace rf::apps {

using nlohmann::json;

StatusLine::StatusLine(bool enabled) : enabled_(enabled), tty_(rf::OutputPump::is_terminal(STDERR_FILENO)) {}

void StatusLine::clear() {
  if (tty_ && on_line_) std::fprintf(stderr, "\r\033[K");
  on_line_ = false;
}

std::string live_line(const json& st, int restarts) {
  // Standby: registered workers outside the running generation (spares, joiners).
  const size_t standby = st.contains("standby") ? st["standby"].size() : 0;
  const auto number = [&](const char* key) -> const json* {
    return st.contains(key) && st[key].is_number() ? &st[key] : nullptr;
  };
  char loss[48] = "", rate[48] = "";
  if (const json* l = number("loss")) std::snprintf(loss, sizeof loss, " | loss %.4f", l->get<double>());
  if (const json* r = number("samples_per_s")) std::snprintf(rate, sizeof rate, " | %.0f samples/s", r->get<double>());
  // Disk checkpoints that could not be written: warnings, training goes on (docs/ckpt.md).
  const int64_t ckpt_failed = st.value("checkpoints_failed", int64_t{0});
  // Several coordinator replicas: who leads, and how often the lead changed.
  std::string leader;
  if (st.contains("leader") && st["leader"].is_string()) {
    leader = " | leader " + st["leader"].get<std::string>();
    if (const int f = st.value("failovers", 0); f > 0) leader += rf::str(" (", f, " failover", f > 1 ? "s" : "", ")");
  }
  return rf::str("ringfence: g ", st.value("generation", 0), " ", st.value("phase", "?"), leader, " | members ",
                 st.value("world", 0), "/", st.value("target_world", 0),
                 standby ? rf::str(" | standby ", standby) : std::string(), " | step ", st.value("step", -1), loss,
                 rate, " | recoveries ", st.value("recoveries", 0), " | restarts ", restarts,
                 ckpt_failed > 0 ? rf::str(" | ckpt failed ", ckpt_failed) : std::string(),
                 st.value("reconfigure", false) ? " | reconfigure" : "", st.value("stop", false) ? " | stopping" : "");
}

void StatusLine::update(const json& st, int restarts) {
  if (!enabled_) return;
  const std::string line = live_line(st, restarts);
  const auto now = rf::Clock::now();
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    on_line_ = true;
  } else {
    // Plain periodic lines: when something other than the step changed, or once a second.
    const std::string key = line.substr(0, line.find(" | step")) + line.substr(line.find(" | recoveries"));
    if (key != last_ || now - last_print_ >= std::chrono::seconds(1)) {
      std::fprintf(stderr, "%s\n", line.c_str());
      last_print_ = now;
      last_ = key;
    }
  }
  std::fflush(stderr);
}

void StatusLine::note(const std::string& text) {
  clear();
  rf::log::info("run", text);
}

namespace {

// A recovery whose round found nobody holding state after the job had run: T came from
// this job's checkpoints, or (T -1: no checkpoint, or no step had been applied yet) the
// job began again at step 0. T is known only once the recovery finished (an unfinished
// record's T is -1 whatever was on disk).
std::string whole_job_note(const json& r) {
  if (!r.value("whole_job_restart", false)) return "";
  if (!r.value("finished", false)) return ", whole-job restart, unfinished";
  return r.value("target_step", int64_t{-1}) >= 0 ? ", restored from disk: no worker held state"
                                                 : ", started again at step 0: no worker held state, none on disk";
}

}  // namespace

void StatusLine::finish(const json& s) {
  clear();
  std::fprintf(stderr, "ringfence: job %s (exit %d): generation %s, %d restart(s), %zu recovery(ies), %.1f s\n",
               s.value("phase", "?").c_str(), s.value("exit_status", 1), s["generations"].dump().c_str(),
               s.value("restarts", 0), s["recoveries"].size(), s.value("wall_s", 0.0));
  if (!s.value("error", "").empty()) std::fprintf(stderr, "ringfence: error: %s\n", s["error"].get<std::string>().c_str());
  if (const int64_t n = s.value("checkpoints_failed", int64_t{0}); n > 0)
    std::fprintf(stderr, "ringfence: %lld checkpoint(s) could not be written (training went on); the last: %s\n",
                 static_cast<long long>(n), s.value("checkpoint_error", "").c_str());
  if (s.contains("leaders") && !s["leaders"].empty()) {
    std::string terms;
    for (const auto& l : s["leaders"])
      terms += rf::str(terms.empty() ? "" : ", ", l.value("id", "?"), " from generation ", l.value("from_generation", 0));
    std::fprintf(stderr, "ringfence: coordinator leaders: %s\n", terms.c_str());
  }
  int i = 0;
  for (const auto& r : s["recoveries"]) {
    const json& w = r["worker"];
    std::string phases;
    for (const char* p : {"detect", "agree", "connect", "transfer", "verify"}) {
      const json& v = r["phases"][p];
      phases += rf::str(" ", p, " ", v.is_number() ? rf::str(v.get<double>(), " ms") : std::string("-"));
    }
    std::fprintf(stderr, "  recovery %d: %s%s of slot %s -> generation %s (world %d, T %lld%s), total %s ms;%s\n", ++i,
                 r.value("planned", false) ? "planned " : "", r.value("cause", "?").c_str(),
                 w.is_object() ? w["slot"].dump().c_str() : "-", r["generation"].dump().c_str(), r.value("world", 0),
                 static_cast<long long>(r.value("target_step", int64_t{-1})),
                 whole_job_note(r).c_str(),
                 r["total_ms"].dump().c_str(), phases.c_str());
  }
}

}  // namespace rf::apps
