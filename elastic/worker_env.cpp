#include "elastic/worker_env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/str.h"

namespace rf::elastic {

std::vector<std::string> worker_environment(const WorkerEnv& w, char* const* inherited) {
  std::vector<std::string> env;
  for (char* const* e = inherited; e && *e; ++e)
    if (std::strncmp(*e, "RINGFENCE_", 10) != 0) env.emplace_back(*e);
  if (!w.coord.empty()) env.push_back("RINGFENCE_COORD=" + w.coord);
  if (!w.etcd.empty()) {  // the worker finds the leading coordinator replica there
    env.push_back("RINGFENCE_ETCD=" + w.etcd);
    env.push_back("RINGFENCE_JOB=" + w.job);
  }
  env.push_back("RINGFENCE_TOKEN=" + w.token);
  env.push_back(str("RINGFENCE_SLOT=", w.slot));
  env.push_back(str("RINGFENCE_INCARNATION=", w.incarnation));
  env.push_back(str("RINGFENCE_WORLD=", w.world));
  env.push_back(str("RINGFENCE_NODE_RANK=", w.node_rank));
  env.push_back(str("RINGFENCE_SPARE=", w.spare ? 1 : 0));
  env.push_back(str("RINGFENCE_LOCAL_RANK=", w.local_rank));
  env.push_back(str("RINGFENCE_LOCAL_WORLD=", w.local_world));
  // Whether the job had run (as this launcher saw it) when this incarnation started: a
  // restart into a job that ran may skip the start-up checks its start made; one before
  // that (after a start-up error) must make them, to fail again and end the job.
  env.push_back(str("RINGFENCE_JOB_RAN=", w.job_ran ? 1 : 0));
  // Every spec goes to the workers; they act on step= specs (FaultSpec::launcher_side()
  // tells the at= ones, which the launcher executes itself).
  env.push_back("RINGFENCE_INJECT=" + w.inject);
  if (!w.trace.empty()) env.push_back("RINGFENCE_TRACE=" + w.trace);  // ddp::TrainerConfig::trace
  // Where this incarnation says why it failed (elastic/error_file.h: the restart policy).
  if (!w.error_file.empty()) env.push_back("RINGFENCE_ERROR_FILE=" + w.error_file);
  // Where the worker writes its flight records (ddp::TrainerConfig::flight_recorder).
  if (!w.run_dir.empty()) env.push_back("RINGFENCE_RUN_DIR=" + w.run_dir);
  return env;
}

namespace {

class Reader {
 public:
  explicit Reader(const Getenv& get) : get_(get) {}
  // nullptr when unset or empty.
  const char* raw(const char* name) const {
    const char* v = get_ ? get_(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  }
  void text(const char* name, std::string& out) const {
    if (const char* v = raw(name)) out = v;
  }
  template <class Int>
  void integer(const char* name, Int& out, int64_t min, int64_t max, bool required = false) const {
    const char* v = raw(name);
    if (!v) {
      if (required) throw InvalidInput(str("environment variable ", name, " is not set (the launcher sets it)"));
      return;
    }
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < min || x > max)
      throw InvalidInput(str("environment variable ", name, "='", v, "' is not an integer in [", min, ", ", max, "]"));
    out = static_cast<Int>(x);
  }
  void flag(const char* name, bool& out) const {
    const char* v = raw(name);
    if (!v) return;
    if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0)
      throw InvalidInput(str("environment variable ", name, "='", v, "' is not 0 or 1"));
    out = v[0] == '1';
  }

 private:
  const Getenv& get_;
};

}  // namespace

WorkerEnv read_worker_env(const Getenv& get) {
  const Reader r(get);
  WorkerEnv w;
  r.text("RINGFENCE_COORD", w.coord);
  r.text("RINGFENCE_ETCD", w.etcd);
  r.text("RINGFENCE_JOB", w.job);
  r.text("RINGFENCE_TOKEN", w.token);
  const bool launched = w.launched();
  if (launched && w.token.empty())
    throw InvalidInput("environment variable RINGFENCE_TOKEN is not set (the launcher sets it)");
  r.integer("RINGFENCE_SLOT", w.slot, 0, 1'000'000, launched);
  r.integer("RINGFENCE_INCARNATION", w.incarnation, 0, int64_t{1} << 53, launched);
  r.integer("RINGFENCE_WORLD", w.world, 1, 1'000'000);
  r.integer("RINGFENCE_NODE_RANK", w.node_rank, 0, 1'000'000);
  r.flag("RINGFENCE_SPARE", w.spare);
  r.integer("RINGFENCE_LOCAL_RANK", w.local_rank, 0, 1'000'000);
  r.integer("RINGFENCE_LOCAL_WORLD", w.local_world, 0, 1'000'000);
  r.flag("RINGFENCE_JOB_RAN", w.job_ran);
  r.text("RINGFENCE_INJECT", w.inject);
  r.text("RINGFENCE_TRACE", w.trace);
  r.text("RINGFENCE_ERROR_FILE", w.error_file);
  r.text("RINGFENCE_RUN_DIR", w.run_dir);
  return w;
}

}  // namespace rf::elastic
