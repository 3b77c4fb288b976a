#include "elastic/launch_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/cli.h"
#include "base/error.h"
#include "base/str.h"
#include "elastic/etcd_client.h"
#include "elastic/leadership.h"

namespace rf::elastic {

// Ours, not CLI::AsNumberWithUnit: that also takes "2 s" and words its errors its own way.
Duration parse_duration(const std::string& flag, const std::string& text) {
  std::string num = text;
  double scale = 1.0;
  if (num.size() > 2 && num.compare(num.size() - 2, 2, "ms") == 0) num.resize(num.size() - 2), scale = 1e-3;
  else if (num.size() > 1 && num.back() == 's') num.pop_back();
  char* end = nullptr;
  const double x = std::strtod(num.c_str(), &end);
  if (num.empty() || end != num.c_str() + num.size() || !std::isfinite(x) || x <= 0 || x * scale > 1e6)
    throw rf::InvalidInput(rf::str(flag, " '", text, "' is not a positive duration (e.g. 2s, 500ms, 1.5)"));
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(x * scale));
}

namespace {

// 100ms, 1s, 1.5s: the duration as a flag takes it.
std::string duration_text(Duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms % 1000 != 0 && ms < 1000) return rf::str(ms, "ms");
  return rf::str(static_cast<double>(ms) / 1000.0, "s");
}

// Ours: CLI11's integers also take hex, octal and leading blanks (base/cli.h).
int parse_int(const std::string& flag, const std::string& text, int min, int max) {
  int x = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || x < min || x > max)
    throw rf::InvalidInput(rf::str(flag, " '", text, "' is not an integer in [", min, ", ", max, "]"));
  return x;
}

using Setter = std::function<void(const std::string& flag, const std::string& value)>;

constexpr const char* kRequired = "required";

// A flag's help: its value's name, what it does, its default ("" : none to show; kRequired:
// the flag must be given).
struct Help {
  std::string meta, text, fallback;
};

// The flags of one command: CLI11 holds the table and collects the values (base/cli.h);
// each setter converts its value. Every name is its own option, so that a message names
// the flag as it was typed (-n or --nprocs); each carries its description and default,
// and help() lists the flags once each, with both.
class Command {
 public:
  Command() { app_.set_help_flag(); }  // -h and --help are the launcher's (main.cpp)
  void value(const std::string& names, const Help& h, Setter set) { add(names, h, set, true); }
  void toggle(const std::string& name, const std::string& text, std::function<void()> set) {
    add(name, {"", text, "off"}, [set](auto&, auto&) { set(); }, false);
  }
  void timing(TimingFlags& t) {
    const TimingFlags d;
    value("--heartbeat", {"T", "how often a worker renews its lease", duration_text(d.heartbeat)},
          [&t](auto& f, auto& v) { t.heartbeat = parse_duration(f, v); });
    value("--lease", {"T", "a worker whose lease is not renewed within T is evicted", duration_text(d.lease)},
          [&t](auto& f, auto& v) { t.lease = parse_duration(f, v); });
    value("--join-window",
          {"T", "how long the first generation waits for more workers to join", duration_text(d.join_window)},
          [&t](auto& f, auto& v) { t.join_window = parse_duration(f, v); });
    value("--min-world-timeout",
          {"T", "how long the job waits below --min-world before it stops", duration_text(d.min_world_timeout)},
          [&t](auto& f, auto& v) { t.min_world_timeout = parse_duration(f, v); });
    value("--report-timeout",
          {"T", "a member silent in a recovery round this long is evicted", duration_text(d.report_timeout)},
          [&t](auto& f, auto& v) { t.report_timeout = parse_duration(f, v); });
  }
  // One line per flag: its names and value, what it does, its default.
  std::string help() const {
    std::string out = "options:\n";
    for (const auto& [names, h] : help_) {
      std::string left = "  " + names + (h.meta.empty() ? "" : " " + h.meta);
      left.resize(std::max<size_t>(left.size() + 2, 28), ' ');
      const std::string fallback = h.fallback == kRequired ? " (required)"
                                   : h.fallback.empty() ? ""
                                                        : " (default: " + h.fallback + ")";
      out += left + h.text + fallback + "\n";
    }
    return out;
  }
  // unknown_hint follows "unknown option 'X'" in that message.
  void parse(const std::vector<std::string>& args, const std::string& unknown_hint) {
    // A value flag takes the next argument whatever it is, as it always has here.
    const auto set = [this](const CLI::Option& o, const std::string& v) { setters_.at(&o)(rf::cli::flag_name(o), v); };
    const auto refuse = [&unknown_hint](const rf::cli::Problem& p) {
      switch (p.kind) {
        case rf::cli::Problem::Unknown: throw rf::InvalidInput(rf::str("unknown option '", p.arg, "'", unknown_hint));
        case rf::cli::Problem::MissingValue: throw rf::InvalidInput(rf::str(p.arg, " needs a value"));
        default: throw rf::InvalidInput(rf::str(p.arg, " takes no value"));
      }
    };
    try {
      rf::cli::parse_checked(app_, args, nullptr, set, refuse);
    } catch (const CLI::ParseError& e) {  // check() leaves CLI11 nothing to refuse
      throw rf::InvalidInput(e.what());
    }
  }

 private:
  void add(const std::string& names, const Help& h, const Setter& set, bool takes_value) {
    for (const std::string& name : CLI::detail::split(names, ',')) {
      CLI::Option* o =
          takes_value ? rf::cli::value_flag(app_, name, h.meta, h.text) : rf::cli::toggle(app_, name, h.text);
      o->default_str(h.fallback);
      setters_[o] = set;
    }
    std::string shown = names;
    for (size_t i = shown.find(','); i != std::string::npos; i = shown.find(',', i + 2)) shown.insert(i + 1, " ");
    help_.emplace_back(shown, h);
  }
  CLI::App app_;
  std::map<const CLI::Option*, Setter> setters_;
  std::vector<std::pair<std::string, Help>> help_;  // in declaration order
};

void check_timing(const TimingFlags& t) {
  if (t.heartbeat >= t.lease)
    throw rf::InvalidInput("--heartbeat must be shorter than --lease (a lease is renewed by heartbeats)");
}


// The flags of `ringfence run`, setting `o` (have_n: -n was given).
void declare_run(Command& c, RunOptions& o, bool& have_n) {
  const RunOptions d;
  c.value("-n,--nprocs", {"N", "workers on this node (with one node: the target world size W)", kRequired},
          [&](auto& f, auto& v) { o.nprocs = parse_int(f, v, 1, 4096), have_n = true; });
  c.value("--min-world", {"M", "the fewest members the job goes on with", "W, every worker"},
          [&](auto& f, auto& v) { o.min_world = parse_int(f, v, 1, 1 << 20); });
  c.value("--spares", {"K", "extra workers per node that wait to fill a dead member's place", rf::str(d.spares)},
          [&](auto& f, auto& v) { o.spares = parse_int(f, v, 0, 4096); });
  c.value("--max-restarts", {"R", "restarts per slot", rf::str(d.max_restarts)},
          [&](auto& f, auto& v) { o.max_restarts = parse_int(f, v, 0, 1 << 20); });
  c.timing(o.timing);
  c.value("--inject", {"SPEC", "a fault to inject (repeatable; SPEC below)", "none"},
          [&](auto&, auto& v) { o.inject.push_back(parse_fault_spec(v)); });
  c.value("--summary", {"FILE", "write the job's summary (JSON) there at the end (under Slurm %n: the node's index)", "none"},
          [&](auto&, auto& v) { o.summary_path = v; });
  c.value("--event-log", {"FILE", "the coordinator's event log (JSON lines)", "none"},
          [&](auto&, auto& v) { o.event_log = v; });
  c.value("--run-dir", {"DIR", "where workers write their flight records when a generation fails (removed at the end if empty)",
                        "a fresh ringfence-run-XXXXXX beside --event-log, else in TMPDIR or /tmp"},
          [&](auto&, auto& v) { o.run_dir = v; });
  c.value("--trace", {"FILE", "a Chrome trace of the job's workers and coordinator", "none"},
          [&](auto&, auto& v) { o.trace = v; });
  c.value("--coord", {"HOST:PORT", "join a `ringfence coord` there", "a coordinator inside this launcher"},
          [&](auto&, auto& v) { o.coord = v; });
  c.value("--etcd", {"URL[,URL...]", "follow the leader of `ringfence coord --etcd` replicas", "none"},
          [&](auto&, auto& v) { o.etcd = v; });
  c.value("--job", {"NAME", "the job's name in etcd", d.job}, [&](auto&, auto& v) { o.job = v; });
  c.value("--token-file", {"FILE", "read the job token there (with --coord or --etcd)", "$RINGFENCE_TOKEN"},
          [&](auto&, auto& v) { o.token_file = v; });
  c.value("--nnodes", {"N", "launchers (nodes) in the job", rf::str(d.nnodes)},
          [&](auto& f, auto& v) { o.nnodes = parse_int(f, v, 1, 1 << 16); });
  c.value("--node-rank", {"I", "this launcher's index among them", rf::str(d.node_rank)},
          [&](auto& f, auto& v) { o.node_rank = parse_int(f, v, 0, 1 << 16); });
  c.toggle("--no-slurm", "inside a Slurm job step, ignore it: place the launchers by hand",
           [&] { o.no_slurm = true; });
  c.value("--spare-nodes", {"K", "under Slurm: the step's last K nodes run -n spare workers each", rf::str(d.spare_nodes)},
          [&](auto& f, auto& v) { o.spare_nodes = parse_int(f, v, 0, 1 << 16); });
  c.value("--coord-port", {"P", "under Slurm: the port of the coordinator on the step's first node",
                           "29500-30499, chosen by the job id"},
          [&](auto& f, auto& v) { o.listen_port = parse_int(f, v, 1, 65535); });
  c.value("--stop-grace", {"T", "after Ctrl-C, workers still running this long later are killed",
                           duration_text(d.stop_grace)},
          [&](auto& f, auto& v) { o.stop_grace = parse_duration(f, v); });
  c.toggle("--quiet", "no live status line", [&] { o.quiet = true; });
}

}  // namespace

RunOptions parse_run_args(const std::vector<std::string>& argv, bool layout_later) {
  RunOptions o;
  // Everything after the first "--" is the worker's command line, passed on untouched
  // (CLI11's own "--" would still let a positional before it through).
  const auto dashes = std::find(argv.begin(), argv.end(), "--");
  if (dashes != argv.end()) o.program.assign(dashes + 1, argv.end());
  bool have_n = false;
  Command c;
  declare_run(c, o, have_n);
  c.parse(std::vector<std::string>(argv.begin(), dashes), " (see ringfence run --help)");
  if (!have_n) throw rf::InvalidInput("-n N (workers) is required");
  if (o.program.empty()) throw rf::InvalidInput("give the worker program after --");
  if (!o.coord.empty() && !o.etcd.empty())
    throw rf::InvalidInput("--coord and --etcd exclude each other: one coordinator, or the leader of replicas in etcd");
  if (!o.etcd.empty()) {
    parse_etcd_endpoints(o.etcd);  // names a bad entry
    control_prefix(o.job);         // names a bad job name
  } else if (o.job != "ringfence") {
    throw rf::InvalidInput("--job names a job in etcd: it needs --etcd");
  }
  check_timing(o.timing);
  if (!layout_later) check_run_layout(o);
  return o;
}

void check_run_layout(const RunOptions& o) {
  const int world = o.nprocs * o.nnodes;
  if (o.min_world > world)
    throw rf::InvalidInput(rf::str("--min-world ", o.min_world, " is larger than the world size ", world));
  if (o.node_rank >= o.nnodes)
    throw rf::InvalidInput(rf::str("--node-rank ", o.node_rank, " must be below --nnodes ", o.nnodes));
  if (o.nnodes > 1 && o.coord.empty() && o.etcd.empty())
    throw rf::InvalidInput("--nnodes > 1 needs --coord HOST:PORT of a `ringfence coord`, or --etcd URLS of its replicas");
  for (const auto& f : o.inject)
    if (f.rank >= world + o.spares * o.nnodes)
      throw rf::InvalidInput(rf::str("--inject '", f.to_string(), "': rank ", f.rank, " is not below the world size ",
                                     world));
}

namespace {

// The flags of `ringfence coord`, setting `o`.
void declare_coord(Command& c, CoordOptions& o) {
  const CoordOptions d;
  c.value("-n,--world", {"W", "the target world size (every node's workers)", kRequired},
          [&](auto& f, auto& v) { o.world = parse_int(f, v, 1, 1 << 20); });
  c.value("--min-world", {"M", "the fewest members the job goes on with", "W"},
          [&](auto& f, auto& v) { o.min_world = parse_int(f, v, 1, 1 << 20); });
  c.value("--host", {"H", "the address to listen on (0.0.0.0: every interface)", d.host},
          [&](auto&, auto& v) { o.host = v; });
  c.value("--port", {"P", "the port to listen on (0: any free port)", rf::str(d.port)},
          [&](auto& f, auto& v) { o.port = parse_int(f, v, 0, 65535); });
  c.timing(o.timing);
  c.value("--event-log", {"FILE", "the event log (JSON lines)", "none"}, [&](auto&, auto& v) { o.event_log = v; });
  c.value("--token-file", {"FILE", "write the job token there (mode 0600); with --etcd, read it", "none"},
          [&](auto&, auto& v) { o.token_file = v; });
  c.value("--etcd", {"URL[,URL...]", "be one of several replicas electing a leader in etcd", "none"},
          [&](auto&, auto& v) { o.etcd = v; });
  c.value("--job", {"NAME", "the job's name in etcd", d.job}, [&](auto&, auto& v) { o.job = v; });
  c.value("--id", {"NAME", "this replica's name", "HOST:PORT"}, [&](auto&, auto& v) { o.id = v; });
  c.value("--advertise", {"HOST", "the address workers reach this replica at", "--host"},
          [&](auto&, auto& v) { o.advertise = v; });
  c.value("--leader-lease", {"T", "the leader's lease in etcd (whole seconds)", duration_text(d.leader_lease)},
          [&](auto& f, auto& v) { o.leader_lease = parse_duration(f, v); });
}

}  // namespace

std::string run_help() {
  Command c;
  RunOptions o;
  bool have_n = false;
  declare_run(c, o, have_n);
  return c.help();
}

std::string coord_help() {
  Command c;
  CoordOptions o;
  declare_coord(c, o);
  return c.help();
}

CoordOptions parse_coord_args(const std::vector<std::string>& argv) {
  CoordOptions o;
  Command c;
  declare_coord(c, o);
  c.parse(argv, "");
  if (o.world == 0) throw rf::InvalidInput("-n W (target world size, all nodes) is required");
  if (!o.etcd.empty()) {
    parse_etcd_endpoints(o.etcd);
    control_prefix(o.job);
    if (o.port == 0) throw rf::InvalidInput("--etcd needs a fixed --port: etcd names the leader by its address");
    if (o.advertise.empty() && o.host == "0.0.0.0")
      throw rf::InvalidInput("--host 0.0.0.0 with --etcd needs --advertise HOST: the address workers reach this replica at");
    if (o.leader_lease < std::chrono::seconds(1)) throw rf::InvalidInput("--leader-lease must be at least 1s (etcd counts whole seconds)");
  } else if (!o.id.empty() || !o.advertise.empty() || o.job != "ringfence") {
    throw rf::InvalidInput("--id, --advertise and --job name a replica in etcd: they need --etcd");
  }
  if (o.min_world > o.world) throw rf::InvalidInput("--min-world is larger than -n");
  check_timing(o.timing);
  return o;
}

}  // namespace rf::elastic
