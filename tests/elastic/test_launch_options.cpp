#include <doctest/doctest.h>

#include "base/error.h"
#include "elastic/launch_options.h"

using namespace rf::elastic;
using namespace std::chrono_literals;

namespace {

// What a parser refuses the command line with ("" when it accepts it).
template <class Parse>
std::string refusal(Parse parse, const std::vector<std::string>& a) {
  try {
    parse(a);
  } catch (const rf::InvalidInput& e) {
    return e.what();
  }
  return "";
}
RunOptions run(const std::vector<std::string>& a) { return parse_run_args(a); }
std::string why(const std::vector<std::string>& a) { return refusal(run, a); }
const auto coord = parse_coord_args;
std::string why(decltype(run)* parse, const std::vector<std::string>& a) { return refusal(parse, a); }
std::string why(decltype(parse_coord_args)* parse, const std::vector<std::string>& a) { return refusal(parse, a); }

}  // namespace

TEST_CASE("ringfence run flags") {
  auto o = parse_run_args({"-n", "4", "--min-world", "3", "--spares", "1", "--max-restarts", "5", "--join-window", "3s",
                           "--heartbeat", "50ms", "--lease", "0.5", "--inject", "kill:rank=2:step=150", "--inject",
                           "stop:rank=1:at=2", "--summary", "s.json", "--", "train_mlp", "--epochs", "2"});
  CHECK(o.nprocs == 4);
  CHECK(o.min_world == 3);
  CHECK(o.spares == 1);
  CHECK(o.max_restarts == 5);
  CHECK(o.timing.join_window == 3s);
  CHECK(o.timing.heartbeat == 50ms);
  CHECK(o.timing.lease == 500ms);
  CHECK(o.timing.report_timeout == 30s);  // the default when the flag is absent
  CHECK(parse_run_args({"-n", "2", "--report-timeout", "5s", "--", "w"}).timing.report_timeout == 5s);
  REQUIRE(o.inject.size() == 2);
  CHECK(o.inject[1].launcher_side());
  CHECK(o.summary_path == "s.json");
  CHECK(o.program == std::vector<std::string>{"train_mlp", "--epochs", "2"});
  auto m = parse_run_args({"-n", "2", "--coord", "10.0.0.1:29400", "--nnodes", "2", "--node-rank", "1", "--", "w"});
  CHECK(m.nnodes == 2);
  CHECK(m.node_rank == 1);
}

TEST_CASE("ringfence run refuses bad command lines with the reason") {
  CHECK(why({"--", "w"}).find("-n N") != std::string::npos);
  CHECK(why({"-n", "2"}).find("after --") != std::string::npos);
  CHECK(why({"-n", "0", "--", "w"}).find("-n '0'") != std::string::npos);
  CHECK(why({"-n", "2", "--min-world", "3", "--", "w"}).find("larger than the world size") != std::string::npos);
  CHECK(why({"-n", "2", "--lease", "50ms", "--heartbeat", "100ms", "--", "w"}).find("shorter than --lease") !=
        std::string::npos);
  CHECK(why({"-n", "2", "--lease", "soon", "--", "w"}).find("--lease 'soon'") != std::string::npos);
  CHECK(why({"-n", "2", "--nnodes", "2", "--", "w"}).find("needs --coord") != std::string::npos);
  CHECK(why({"-n", "2", "--frobnicate", "--", "w"}).find("unknown option '--frobnicate'") != std::string::npos);
  CHECK(why({"-n", "2", "--inject"}).find("--inject needs a value") != std::string::npos);
  CHECK(why({"-n", "2", "--inject", "kill:rank=1", "--", "w"}).find("fault spec") != std::string::npos);
}

TEST_CASE("ringfence coord flags") {
  auto o = parse_coord_args({"-n", "8", "--host", "0.0.0.0", "--port", "29500", "--token-file", "t"});
  CHECK(o.world == 8);
  CHECK(o.host == "0.0.0.0");
  CHECK(o.port == 29500);
  CHECK_THROWS_AS(parse_coord_args({"--port", "1"}), rf::InvalidInput);
  CHECK_THROWS_AS(parse_coord_args({"-n", "2", "--port", "70000"}), rf::InvalidInput);
}

TEST_CASE("coordinator replicas in etcd: run and coord flags, and what they refuse") {
  auto r = parse_run_args({"-n", "2", "--etcd", "10.0.0.1:2379,http://10.0.0.2:2379", "--job", "j-1", "--nnodes", "3",
                           "--node-rank", "2", "--", "w"});
  CHECK(r.etcd == "10.0.0.1:2379,http://10.0.0.2:2379");
  CHECK(r.job == "j-1");
  auto c = parse_coord_args({"-n", "6", "--etcd", "127.0.0.1:2379", "--port", "29500", "--id", "c1", "--job", "j",
                             "--leader-lease", "3s", "--token-file", "t"});
  CHECK(c.etcd == "127.0.0.1:2379");
  CHECK(c.id == "c1");
  CHECK(c.leader_lease == std::chrono::seconds(3));
  CHECK(why(run, {"-n", "2", "--coord", "h:1", "--etcd", "h:2379", "--", "w"}).find("exclude each other") !=
        std::string::npos);
  CHECK(why(run, {"-n", "2", "--etcd", "ftp://h:2379", "--", "w"}).find("'ftp://h:2379'") != std::string::npos);
  CHECK(why(run, {"-n", "2", "--etcd", "h:2379", "--job", "a/b", "--", "w"}).find("job name 'a/b'") != std::string::npos);
  CHECK(why(run, {"-n", "2", "--job", "j", "--", "w"}).find("needs --etcd") != std::string::npos);
  CHECK(why(coord, {"-n", "2", "--etcd", "h:2379", "--port", "0"}).find("fixed --port") != std::string::npos);
  CHECK(why(coord, {"-n", "2", "--etcd", "h:2379", "--host", "0.0.0.0"}).find("--advertise") != std::string::npos);
  CHECK(why(coord, {"-n", "2", "--etcd", "h:2379", "--leader-lease", "500ms"}).find("at least 1s") !=
        std::string::npos);
  CHECK(why(coord, {"-n", "2", "--id", "c1"}).find("need --etcd") != std::string::npos);
}

TEST_CASE("the worker's command line after -- is passed on untouched, and flags keep their typed names") {
  // Our own flags, another "--" and an empty argument after the first "--" are the worker's.
  auto o = parse_run_args({"-n", "2", "--", "w", "-n", "3", "--quiet", "--", "", "--lease=x"});
  CHECK(o.nprocs == 2);
  CHECK_FALSE(o.quiet);
  CHECK(o.program == std::vector<std::string>{"w", "-n", "3", "--quiet", "--", "", "--lease=x"});
  // A value flag takes the next argument whatever it is; --name=VALUE is the same flag.
  CHECK(parse_run_args({"-n", "2", "--summary", "--odd", "--", "w"}).summary_path == "--odd");
  auto eq = parse_run_args({"--nprocs=3", "--lease=2s", "--heartbeat=500ms", "--stop-grace", "1.5", "--", "w"});
  CHECK(eq.nprocs == 3);
  CHECK(eq.timing.lease == std::chrono::seconds(2));
  CHECK(eq.timing.heartbeat == std::chrono::milliseconds(500));
  CHECK(eq.stop_grace == std::chrono::milliseconds(1500));
  // The last of a repeated flag wins; --inject adds up.
  CHECK(parse_run_args({"-n", "2", "-n", "3", "--", "w"}).nprocs == 3);
  CHECK(why({"--nprocs", "0", "--", "w"}) == "--nprocs '0' is not an integer in [1, 4096]");
  CHECK(why({"-n", "0x2", "--", "w"}) == "-n '0x2' is not an integer in [1, 4096]");  // decimal only
  CHECK(why({"-n", " 2", "--", "w"}) == "-n ' 2' is not an integer in [1, 4096]");
  CHECK(why({"-n", "2", "--quiet=yes", "--", "w"}) == "--quiet takes no value");
  CHECK(why({"-n", "2", "w"}) == "unknown option 'w' (see ringfence run --help)");
  CHECK(why({"-n2", "--", "w"}) == "unknown option '-n2' (see ringfence run --help)");
  CHECK(why({"-n", "0", "--bogus", "--", "w"}) == "-n '0' is not an integer in [1, 4096]");  // the first mistake
  CHECK(why({"--bogus", "-n", "0", "--", "w"}) == "unknown option '--bogus' (see ringfence run --help)");
  CHECK(why({"-n", "2", "--stop-grace", "0", "--", "w"}) ==
        "--stop-grace '0' is not a positive duration (e.g. 2s, 500ms, 1.5)");
  CHECK_THROWS_WITH_AS(parse_coord_args({"-n", "2", "--bogus"}), "unknown option '--bogus'", rf::InvalidInput);
  CHECK_THROWS_WITH_AS(parse_coord_args({"-n", "2", "--port"}), "--port needs a value", rf::InvalidInput);
  CHECK_THROWS_WITH_AS(parse_coord_args({"--world", "-1"}), "--world '-1' is not an integer in [1, 1048576]",
                       rf::InvalidInput);
}

TEST_CASE("ringfence run --help and coord --help list every flag once, with what it does and its default") {
  const std::string run = run_help();
  for (const char* flag : {"-n, --nprocs N", "--min-world M", "--spares K", "--max-restarts R", "--heartbeat T", "--lease T",
                           "--join-window T", "--min-world-timeout T", "--report-timeout T", "--inject SPEC",
                           "--summary FILE", "--event-log FILE", "--trace FILE", "--coord HOST:PORT", "--etcd URL",
                           "--job NAME", "--token-file FILE", "--nnodes N", "--node-rank I", "--stop-grace T", "--quiet"})
    CHECK_MESSAGE(run.find(std::string("  ") + flag) != std::string::npos, flag);
  CHECK(run.find("restarts per slot (default: 3)") != std::string::npos);
  CHECK(run.find("(default: 100ms)") != std::string::npos);
  CHECK(run.find("(default: 10s)") != std::string::npos);
  CHECK(run.find("(required)") != std::string::npos);
  CHECK(run.find("  --nprocs") == std::string::npos);  // -n and --nprocs are one line
  const std::string coord = coord_help();
  for (const char* flag : {"-n, --world W", "--host H", "--port P", "--leader-lease T", "--advertise HOST", "--id NAME"})
    CHECK_MESSAGE(coord.find(std::string("  ") + flag) != std::string::npos, flag);
  CHECK(coord.find("(default: 29400)") != std::string::npos);
  CHECK(coord.find("(default: 127.0.0.1)") != std::string::npos);
  CHECK(coord.find("(default: 3s)") != std::string::npos);
}
