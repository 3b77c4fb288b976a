#include "apps/ringfence/timeline_html.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/ringfence/trace_merge.h"
#include "base/log.h"
#include "base/str.h"

namespace rf::apps {

using nlohmann::json;

namespace {

constexpr int kLabelW = 250;     // the track names' column
constexpr int kPlotW = 1500;     // the time axis
constexpr int kLevelH = 14;      // one nesting level of spans
constexpr int kTop = 34;         // above the first track: the time axis

std::string esc(const std::string& s) {
  std::string o;
  for (const char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// "allreduce wait" -> "allreduce-wait": a CSS class per span name, for its colour.
std::string css_name(const std::string& s) {
  std::string o;
  for (const char c : s) o += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return o;
}

struct Event {
  std::string name;
  char ph = 'X';
  int64_t ts = 0, dur = 0;  // relative to the trace's first event
  json args;
  int depth = 0;
};

struct Track {
  int pid = 0;
  int64_t tid = 0;
  std::string label;
  std::vector<Event> events;
  int levels = 1;
  int y = 0;
};

std::string attr_int(const char* name, const json& args, const char* key) {
  if (!args.is_object() || !args.contains(key) || !args[key].is_number_integer()) return "";
  return str(" ", name, "=\"", args[key].get<int64_t>(), "\"");
}

// A span's or an instant's data attributes: what a test may select on.
std::string data_attrs(const Event& e) {
  std::string a = str(" data-name=\"", esc(e.name), "\" data-ts-us=\"", e.ts, "\"");
  if (e.ph == 'X') a += str(" data-dur-us=\"", e.dur, "\"");
  a += attr_int("data-step", e.args, "step");
  a += attr_int("data-g", e.args, "g");
  a += attr_int("data-rank", e.args, "rank");
  a += attr_int("data-slot", e.args, "slot");
  a += attr_int("data-incarnation", e.args, "incarnation");
  a += attr_int("data-bucket", e.args, "bucket");
  a += attr_int("data-status", e.args, "status");
  if (e.args.is_object() && e.args.contains("cause") && e.args["cause"].is_string())
    a += str(" data-cause=\"", esc(e.args["cause"].get<std::string>()), "\"");
  return a;
}

std::string tooltip(const Event& e) {
  std::ostringstream t;
  t << e.name;
  if (e.args.is_object())
    for (const auto& [k, v] : e.args.items()) {
      const bool absent = v.is_null() || (v.is_number_integer() && v.get<int64_t>() == -1) ||
                          (v.is_string() && v.get<std::string>().empty());
      if (absent) continue;
      t << "  " << k << " " << (v.is_string() ? v.get<std::string>() : v.dump());
    }
  char buf[96];
  if (e.ph == 'X') std::snprintf(buf, sizeof buf, "\n%.3f ms at %+.6f s", e.dur / 1e3, e.ts / 1e6);
  else std::snprintf(buf, sizeof buf, "\nat %+.6f s", e.ts / 1e6);
  t << buf;
  return esc(t.str());
}

// Nesting levels within a track: a span starting inside an open one goes one level down.
int assign_depths(std::vector<Event>& evs) {
  std::stable_sort(evs.begin(), evs.end(), [](const Event& a, const Event& b) {
    return a.ts != b.ts ? a.ts < b.ts : a.dur > b.dur;
  });
  std::vector<int64_t> open;  // end times, outermost first
  int levels = 1;
  for (Event& e : evs) {
    if (e.ph != 'X') continue;
    while (!open.empty() && open.back() <= e.ts) open.pop_back();
    e.depth = static_cast<int>(open.size());
    levels = std::max(levels, e.depth + 1);
    open.push_back(e.ts + e.dur);
  }
  return levels;
}

const char* kStyle = R"(
body{font:13px system-ui,sans-serif;margin:12px;background:#fff;color:#222}
h1{font-size:17px;margin:0 0 4px}
.sub{color:#555;margin-bottom:8px}
svg{border:1px solid #ccc;background:#fcfcfc;cursor:grab}
.lbl{font-size:12px;fill:#222}.plbl{font-size:12px;font-weight:bold;fill:#000}
.grid{stroke:#e2e2e2}.tick{font-size:11px;fill:#555}
.row{fill:#f3f3f3}.row.odd{fill:#fafafa}.sep{stroke:#999}
rect.span{stroke:#0003;stroke-width:.5}
.instant path{stroke:#000;stroke-width:.6}.instant text{font-size:10px;fill:#111}
.legend span{display:inline-block;padding:1px 6px;margin:2px;border-radius:3px;font-size:12px}
.n-step{fill:#d9d9d9}.n-redo{fill:#e03131}.n-failed-step{fill:#9c36b5}
.n-forward{fill:#4c6ef5}.n-backward{fill:#f59f00}.n-allreduce{fill:#2f9e44}.n-allreduce-wait{fill:#96d7a4}
.n-optimizer{fill:#fcc419}
.n-abort{fill:#c92a2a}.n-report{fill:#845ef7}.n-plan{fill:#a0522d}.n-connect{fill:#1098ad}
.n-transfer{fill:#fd7e14}.n-verify{fill:#37b24d}.n-resume{fill:#868e96}.n-recovery{fill:#ffa8a8}
path.n-exit{fill:#000}path.n-inject{fill:#e03131}path.n-revoked,path.n-revoke{fill:#c92a2a}
path.n-spawn{fill:#1098ad}path.n-running{fill:#37b24d}
)";

// Wheel: zoom about the pointer; drag: pan; double-click: the whole trace. Every drawn
// element keeps its time in data-ts-us (and data-dur-us), so a view is a pure function
// of [v0, v1].
const char* kScript = R"(
(function(){
const svg=document.getElementById('tl'),L=+svg.dataset.labelW,W=+svg.dataset.plotW,T=+svg.dataset.totalUs;
let v0=0,v1=T;const x=t=>L+(t-v0)/(v1-v0)*W;
const spans=[...svg.querySelectorAll('rect.span')],inst=[...svg.querySelectorAll('g.instant')];
const ticks=svg.getElementById('ticks'),H=+svg.getAttribute('height');
function draw(){
 for(const r of spans){const a=x(+r.dataset.tsUs),b=x(+r.dataset.tsUs+ +r.dataset.durUs);
  const c0=Math.max(a,L),c1=Math.min(b,L+W);r.setAttribute('x',c0);
  r.setAttribute('width',Math.max(c1-c0,c1>=L&&c0<=L+W?0.6:0));}
 for(const g of inst){const p=x(+g.dataset.tsUs);g.setAttribute('transform','translate('+p+','+g.dataset.y+')');
  g.style.display=p<L||p>L+W?'none':'';}
 const span=v1-v0,raw=span/10,p=Math.pow(10,Math.floor(Math.log10(raw))),st=[1,2,5,10].map(k=>k*p).find(s=>s>=raw);
 let h='';for(let t=Math.ceil(v0/st)*st;t<=v1;t+=st){const px=x(t);
  h+='<line class="grid" x1="'+px+'" x2="'+px+'" y1="20" y2="'+H+'"/>';
  h+='<text class="tick" x="'+(px+2)+'" y="14">'+(t/1e6).toFixed(st<1e3?4:st<1e6?3:1)+' s</text>';}
 ticks.innerHTML=h;}
svg.addEventListener('wheel',e=>{e.preventDefault();const px=e.offsetX;if(px<L)return;
 const t=v0+(px-L)/W*(v1-v0),f=e.deltaY>0?1.25:0.8;v0=t-(t-v0)*f;v1=t+(v1-t)*f;draw();},{passive:false});
let drag=null;svg.addEventListener('mousedown',e=>{drag={x:e.clientX,v0,v1};});
window.addEventListener('mouseup',()=>{drag=null;});
window.addEventListener('mousemove',e=>{if(!drag)return;
 const d=(e.clientX-drag.x)/W*(drag.v1-drag.v0);v0=drag.v0-d;v1=drag.v1-d;draw();});
svg.addEventListener('dblclick',()=>{v0=0;v1=T;draw();});
draw();})();
)";

using ThreadNames = std::map<std::pair<int, int64_t>, std::string>;

std::string track_label(const std::map<int, std::string>& pnames, const ThreadNames& tnames, int pid, int64_t tid) {
  auto t = tnames.find({pid, tid});
  if (t != tnames.end()) return t->second;
  auto p = pnames.find(pid);
  return p != pnames.end() ? p->second : str("pid ", pid, " tid ", tid);
}

// A Chrome trace read into tracks: process and thread names, events by (pid, tid).
struct Trace {
  std::map<int, std::string> pnames;
  ThreadNames tnames;
  std::map<std::pair<int, int64_t>, Track> tracks;  // ordered by pid, then tid
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
};

void add_event(Trace& tr, const json& e) {
  if (!e.is_object()) return;
  const std::string ph = e.value("ph", "");
  const int pid = e.value("pid", 0);
  const int64_t tid = e.value("tid", int64_t{0});
  if (ph == "M") {
    const std::string n = e.contains("args") ? e["args"].value("name", "") : "";
    if (e.value("name", "") == "process_name") tr.pnames[pid] = n;
    if (e.value("name", "") == "thread_name") tr.tnames[{pid, tid}] = n;
    return;
  }
  if (ph != "X" && ph != "i" && ph != "I") return;
  Event ev;
  ev.name = e.value("name", "?");
  ev.ph = ph == "X" ? 'X' : 'i';
  ev.ts = e.value("ts", int64_t{0});
  ev.dur = ev.ph == 'X' ? std::max<int64_t>(0, e.value("dur", int64_t{0})) : 0;
  ev.args = e.value("args", json::object());
  tr.t0 = std::min(tr.t0, ev.ts);
  tr.t1 = std::max(tr.t1, ev.ts + ev.dur);
  Track& t = tr.tracks[{pid, tid}];
  t.pid = pid;
  t.tid = tid;
  t.events.push_back(std::move(ev));
}

// The trace at `path`, or the launcher's exit status when it cannot be drawn (said why).
std::variant<Trace, int> read_trace(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    rf::log::error("timeline", "cannot open '", path, "'");
    return 2;
  }
  json doc = json::parse(f, nullptr, false);
  const json* evs = doc.is_array()                                   ? &doc
                    : doc.is_object() && doc.contains("traceEvents") ? &doc["traceEvents"]
                                                                     : nullptr;
  if (doc.is_discarded() || !evs || !evs->is_array()) {
    rf::log::error("timeline", "'", path, "' is not a Chrome trace (a JSON array or {\"traceEvents\": [...]})");
    return 1;
  }
  Trace tr;
  for (const json& e : *evs) add_event(tr, e);
  if (tr.tracks.empty()) {
    rf::log::error("timeline", "no events in '", path, "'");
    return 1;
  }
  return tr;
}

// Where each track goes: its y, its nesting levels; times relative to the first event.
struct Layout {
  int64_t total = 1;  // the time axis, in us
  int height = 0;
  std::vector<std::pair<int, int>> separators;  // (y, pid) where a process's tracks begin
};

Layout lay_out(Trace& tr) {
  Layout l;
  // A little room after the last event for its label.
  l.total = std::max<int64_t>(1, (tr.t1 - tr.t0) + (tr.t1 - tr.t0) / 25);
  int y = kTop;
  int prev_pid = -1;
  for (auto& [key, t] : tr.tracks) {
    for (Event& e : t.events) e.ts -= tr.t0;
    t.levels = assign_depths(t.events);
    t.label = track_label(tr.pnames, tr.tnames, t.pid, t.tid);
    if (t.pid != prev_pid) {
      l.separators.push_back({y, t.pid});
      y += 16;
      prev_pid = t.pid;
    }
    t.y = y;
    y += t.levels * kLevelH + 8;
  }
  l.height = y + 10;
  return l;
}

// A track's group element: what it is (coordinator, a worker's training or all-reduce
// lane), its time range and its worker's exit status, then its row and label.
void open_track(std::ostream& svg, const Track& t, int& odd) {
  const bool coordinator = t.pid == kCoordinatorPid;
  const int lane = static_cast<int>(t.tid % 100);
  const char* kind = coordinator ? "coordinator" : lane == 0 ? "train" : "allreduce";
  int64_t first = INT64_MAX, last = INT64_MIN;
  std::string exit_status;
  for (const Event& e : t.events) {
    first = std::min(first, e.ts);
    last = std::max(last, e.ts + e.dur);
    if (e.name == "exit" && e.args.contains("status")) exit_status = e.args["status"].dump();
  }
  const int h = t.levels * kLevelH + 4;
  svg << "<g class=\"track\" data-pid=\"" << t.pid << "\" data-tid=\"" << t.tid << "\" data-kind=\"" << kind << "\"";
  if (!coordinator) svg << " data-slot=\"" << t.pid - 2 << "\" data-incarnation=\"" << t.tid / 100 << "\"";
  svg << " data-first-us=\"" << first << "\" data-last-us=\"" << last << "\"";
  if (!exit_status.empty()) svg << " data-exit-status=\"" << exit_status << "\"";
  svg << ">\n<rect class=\"row" << (odd++ % 2 ? " odd" : "") << "\" x=\"" << kLabelW << "\" y=\"" << t.y - 2
      << "\" width=\"" << kPlotW << "\" height=\"" << h << "\"/>"
      << "<text class=\"lbl\" x=\"14\" y=\"" << t.y + 10 << "\">" << esc(t.label) << "</text>\n";
}

void draw_spans(std::ostream& svg, const Track& t, int64_t total) {
  for (const Event& e : t.events) {
    if (e.ph != 'X') continue;
    const double x0 = kLabelW + static_cast<double>(e.ts) / total * kPlotW;
    const double w = std::max(0.6, static_cast<double>(e.dur) / total * kPlotW);
    svg << "<rect class=\"span n-" << css_name(e.name) << "\" x=\"" << x0 << "\" y=\"" << t.y + e.depth * kLevelH
        << "\" width=\"" << w << "\" height=\"" << kLevelH - 2 << "\"" << data_attrs(e) << "><title>" << tooltip(e)
        << "</title></rect>\n";
  }
}

// Labels for what a reader looks for first (every instant has its tooltip): to the right
// of the marker, or to its left when the next label is too close (an inject, then the
// exit it caused).
void draw_instants(std::ostream& svg, const Track& t, int64_t total) {
  auto labelled = [](const Event& e) {
    return e.ph != 'X' && (e.name == "exit" || e.name == "inject" || e.name == "revoke" || e.name == "running");
  };
  std::vector<double> label_x;
  for (const Event& e : t.events)
    if (labelled(e)) label_x.push_back(kLabelW + static_cast<double>(e.ts) / total * kPlotW);
  size_t nth_label = 0;
  for (const Event& e : t.events) {
    if (e.ph == 'X') continue;
    const double x0 = kLabelW + static_cast<double>(e.ts) / total * kPlotW;
    const bool label = labelled(e);
    const bool left = label && ++nth_label < label_x.size() && label_x[nth_label] - x0 < 60;
    std::string text = e.name;
    if (e.name == "exit") text = str("exit ", e.args.value("status", json(0)).dump());
    svg << "<g class=\"instant\" transform=\"translate(" << x0 << "," << t.y << ")\" data-y=\"" << t.y << "\""
        << data_attrs(e) << "><title>" << tooltip(e) << "</title><path class=\"n-" << css_name(e.name)
        << "\" d=\"M0 0 L4 6 L0 12 L-4 6 Z\"/>";
    if (label)
      svg << "<text " << (left ? "x=\"-5\" text-anchor=\"end\"" : "x=\"5\"") << " y=\"10\">" << esc(text) << "</text>";
    svg << "</g>\n";
  }
}

std::string draw_svg(const Trace& tr, const Layout& l) {
  std::ostringstream svg;
  svg << "<svg id=\"tl\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kLabelW + kPlotW + 10 << "\" height=\""
      << l.height << "\" data-label-w=\"" << kLabelW << "\" data-plot-w=\"" << kPlotW << "\" data-total-us=\"" << l.total
      << "\">\n";
  svg << "<g id=\"ticks\"></g>\n";
  for (const auto& [sy, pid] : l.separators) {
    auto p = tr.pnames.find(pid);
    svg << "<line class=\"sep\" x1=\"0\" x2=\"" << kLabelW + kPlotW << "\" y1=\"" << sy << "\" y2=\"" << sy << "\"/>"
        << "<text class=\"plbl\" x=\"4\" y=\"" << sy + 12 << "\">"
        << esc(p != tr.pnames.end() ? p->second : str("pid ", pid)) << "</text>\n";
  }
  int odd = 0;
  for (const auto& [key, t] : tr.tracks) {
    open_track(svg, t, odd);
    draw_spans(svg, t, l.total);
    draw_instants(svg, t, l.total);
    svg << "</g>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace

int write_timeline_html(const std::string& trace_path, const std::string& out_path) {
  auto read = read_trace(trace_path);
  if (const int* status = std::get_if<int>(&read)) return *status;
  Trace& tr = std::get<Trace>(read);
  const Layout layout = lay_out(tr);
  const std::string svg = draw_svg(tr, layout);
  std::ofstream out(out_path);
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ringfence timeline</title><style>"
      << kStyle << "</style></head><body>\n<h1>ringfence timeline</h1>\n<div class=\"sub\">"
      << esc(std::filesystem::path(trace_path).filename().string())
      << " &middot; " << str((tr.t1 - tr.t0) / 1e6) << " s &middot; " << tr.tracks.size()
      << " tracks &middot; 0 s = the first event &middot; wheel: zoom, drag: pan, double-click: all</div>\n"
      << "<div class=\"legend\">";
  for (const char* n : {"step", "redo", "failed step", "forward", "backward", "allreduce", "allreduce wait",
                        "optimizer", "abort", "report", "plan", "connect", "transfer", "verify", "resume",
                        "recovery"}) {
    out << "<span><svg width=\"10\" height=\"10\"><rect class=\"n-" << css_name(n)
        << "\" width=\"10\" height=\"10\"/></svg> " << n << "</span>";
  }
  out << "</div>\n" << svg << "<script>" << kScript << "</script>\n</body></html>\n";
  if (!out) {
    rf::log::error("timeline", "cannot write '", out_path, "'");
    return 1;
  }
  return 0;
}

}  // namespace rf::apps
