#include "elastic/launch_options.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/error.h"
#include "base/str.h"
#include "elastic/etcd_client.h"
#include "elastic/leadership.h"

namespace rf::elastic {

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

int parse_int(const std::string& flag, const std::string& text, int min, int max) {
  int x = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || x < min || x > max)
    throw rf::InvalidInput(rf::str(flag, " '", text, "' is not an integer in [", min, ", ", max, "]"));
  return x;
}

// Walks flags; `value()` takes the flag's argument or throws naming the flag.
struct Args {
  const std::vector<std::string>& a;
  size_t i = 0;
  std::string flag;
  bool next() {
    if (i >= a.size()) return false;
    flag = a[i++];
    return true;
  }
  std::string value() {
    if (i >= a.size()) throw rf::InvalidInput(rf::str(flag, " needs a value"));
    return a[i++];
  }
};

bool timing_flag(Args& args, TimingFlags& t) {
  if (args.flag == "--heartbeat") t.heartbeat = parse_duration(args.flag, args.value());
  else if (args.flag == "--lease") t.lease = parse_duration(args.flag, args.value());
  else if (args.flag == "--join-window") t.join_window = parse_duration(args.flag, args.value());
  else if (args.flag == "--min-world-timeout") t.min_world_timeout = parse_duration(args.flag, args.value());
  else if (args.flag == "--report-timeout") t.report_timeout = parse_duration(args.flag, args.value());
  else return false;
  return true;
}

void check_timing(const TimingFlags& t) {
  if (t.heartbeat >= t.lease)
    throw rf::InvalidInput("--heartbeat must be shorter than --lease (a lease is renewed by heartbeats)");
}

}  // namespace

RunOptions parse_run_args(const std::vector<std::string>& argv) {
  RunOptions o;
  Args args{argv, 0, {}};
  bool have_n = false;
  while (args.next()) {
    const std::string& f = args.flag;
    if (f == "--") {
      o.program.assign(argv.begin() + static_cast<long>(args.i), argv.end());
      break;
    }
    if (f == "-n" || f == "--nprocs") o.nprocs = parse_int(f, args.value(), 1, 4096), have_n = true;
    else if (f == "--min-world") o.min_world = parse_int(f, args.value(), 1, 1 << 20);
    else if (f == "--spares") o.spares = parse_int(f, args.value(), 0, 4096);
    else if (f == "--max-restarts") o.max_restarts = parse_int(f, args.value(), 0, 1 << 20);
    else if (timing_flag(args, o.timing)) {
    } else if (f == "--inject") o.inject.push_back(parse_fault_spec(args.value()));
    else if (f == "--summary") o.summary_path = args.value();
    else if (f == "--event-log") o.event_log = args.value();
    else if (f == "--trace") o.trace = args.value();
    else if (f == "--coord") o.coord = args.value();
    else if (f == "--etcd") o.etcd = args.value();
    else if (f == "--job") o.job = args.value();
    else if (f == "--token-file") o.token_file = args.value();
    else if (f == "--nnodes") o.nnodes = parse_int(f, args.value(), 1, 1 << 16);
    else if (f == "--node-rank") o.node_rank = parse_int(f, args.value(), 0, 1 << 16);
    else if (f == "--stop-grace") o.stop_grace = parse_duration(f, args.value());
    else if (f == "--quiet") o.quiet = true;
    else throw rf::InvalidInput(rf::str("unknown option '", f, "' (see ringfence run --help)"));
  }
  if (!have_n) throw rf::InvalidInput("-n N (workers) is required");
  if (o.program.empty()) throw rf::InvalidInput("give the worker program after --");
  const int world = o.nprocs * o.nnodes;
  if (o.min_world > world)
    throw rf::InvalidInput(rf::str("--min-world ", o.min_world, " is larger than the world size ", world));
  if (o.node_rank >= o.nnodes)
    throw rf::InvalidInput(rf::str("--node-rank ", o.node_rank, " must be below --nnodes ", o.nnodes));
  if (!o.coord.empty() && !o.etcd.empty())
    throw rf::InvalidInput("--coord and --etcd exclude each other: one coordinator, or the leader of replicas in etcd");
  if (!o.etcd.empty()) {
    parse_etcd_endpoints(o.etcd);  // names a bad entry
    control_prefix(o.job);         // names a bad job name
  } else if (o.job != "ringfence") {
    throw rf::InvalidInput("--job names a job in etcd: it needs --etcd");
  }
  if (o.nnodes > 1 && o.coord.empty() && o.etcd.empty())
    throw rf::InvalidInput("--nnodes > 1 needs --coord HOST:PORT of a `ringfence coord`, or --etcd URLS of its replicas");
  for (const auto& f : o.inject)
    if (f.rank >= world + o.spares * o.nnodes)
      throw rf::InvalidInput(rf::str("--inject '", f.to_string(), "': rank ", f.rank, " is not below the world size ",
                                     world));
  check_timing(o.timing);
  return o;
}

CoordOptions parse_coord_args(const std::vector<std::string>& argv) {
  CoordOptions o;
  Args args{argv, 0, {}};
  while (args.next()) {
    const std::string& f = args.flag;
    if (f == "-n" || f == "--world") o.world = parse_int(f, args.value(), 1, 1 << 20);
    else if (f == "--min-world") o.min_world = parse_int(f, args.value(), 1, 1 << 20);
    else if (f == "--host") o.host = args.value();
    else if (f == "--port") o.port = parse_int(f, args.value(), 0, 65535);
    else if (timing_flag(args, o.timing)) {
    } else if (f == "--event-log") o.event_log = args.value();
    else if (f == "--token-file") o.token_file = args.value();
    else if (f == "--etcd") o.etcd = args.value();
    else if (f == "--job") o.job = args.value();
    else if (f == "--id") o.id = args.value();
    else if (f == "--advertise") o.advertise = args.value();
    else if (f == "--leader-lease") o.leader_lease = parse_duration(f, args.value());
    else throw rf::InvalidInput(rf::str("unknown option '", f, "'"));
  }
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
