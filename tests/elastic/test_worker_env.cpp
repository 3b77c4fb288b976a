// The environment `ringfence run` gives a worker (elastic/worker_env.h): the
// launcher's own without its RINGFENCE_* entries, then this worker's, the local rank and
// the local world (what train_mlp's --device cuda places itself by) among them.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "elastic/worker_env.h"

using rf::elastic::worker_environment;
using rf::elastic::WorkerEnv;

TEST_CASE("a worker's environment: inherited less RINGFENCE_*, then the launcher's values") {
  std::string path = "PATH=/bin", old_slot = "RINGFENCE_SLOT=9", cuda = "CUDA_VISIBLE_DEVICES=0,1";
  char* inherited[] = {path.data(), old_slot.data(), cuda.data(), nullptr};
  const WorkerEnv w{.coord = "127.0.0.1:7000", .etcd = "", .job = "", .token = "t", .slot = 5, .incarnation = 2, .world = 6,
                    .node_rank = 1, .spare = true, .local_rank = 3, .local_world = 4, .job_ran = true,
                    .inject = "kill:rank=1:step=3", .error_file = "/tmp/rf-x/error-5-2"};
  const std::vector<std::string> env = worker_environment(w, inherited);
  const std::vector<std::string> want = {
      "PATH=/bin", "CUDA_VISIBLE_DEVICES=0,1", "RINGFENCE_COORD=127.0.0.1:7000", "RINGFENCE_TOKEN=t",
      "RINGFENCE_SLOT=5", "RINGFENCE_INCARNATION=2", "RINGFENCE_WORLD=6", "RINGFENCE_NODE_RANK=1",
      "RINGFENCE_SPARE=1", "RINGFENCE_LOCAL_RANK=3", "RINGFENCE_LOCAL_WORLD=4", "RINGFENCE_JOB_RAN=1",
      "RINGFENCE_INJECT=kill:rank=1:step=3", "RINGFENCE_ERROR_FILE=/tmp/rf-x/error-5-2"};
  CHECK(env == want);
  CHECK(std::count(env.begin(), env.end(), "RINGFENCE_SLOT=9") == 0);  // the launcher's own is not passed on
  CHECK(worker_environment(WorkerEnv{}, nullptr).size() == want.size() - 4);  // no COORD, no ERROR_FILE either
}

TEST_CASE("with coordinator replicas the worker gets etcd and the job name instead of an address") {
  WorkerEnv w;
  w.etcd = "http://10.0.0.9:2379,http://10.0.0.8:2379";
  w.job = "j1";
  const std::vector<std::string> env = worker_environment(w, nullptr);
  CHECK(std::count(env.begin(), env.end(), "RINGFENCE_ETCD=http://10.0.0.9:2379,http://10.0.0.8:2379") == 1);
  CHECK(std::count(env.begin(), env.end(), "RINGFENCE_JOB=j1") == 1);
  CHECK(std::none_of(env.begin(), env.end(), [](const std::string& e) { return e.rfind("RINGFENCE_COORD=", 0) == 0; }));
}

namespace {
// getenv over "NAME=value" entries.
rf::elastic::Getenv lookup(const std::vector<std::string>& env) {
  return [env](const char* name) -> const char* {
    const std::string prefix = std::string(name) + "=";
    for (const auto& e : env)
      if (e.rfind(prefix, 0) == 0) return e.c_str() + prefix.size();
    return nullptr;
  };
}
}  // namespace

TEST_CASE("a worker reads back what the launcher wrote, with one parser") {
  const WorkerEnv w{.coord = "127.0.0.1:7000", .etcd = "", .job = "", .token = "t", .slot = 5, .incarnation = 2, .world = 6,
                    .node_rank = 1, .spare = true, .local_rank = 3, .local_world = 4, .job_ran = true,
                    .inject = "kill:rank=1:step=3", .trace = "/tmp/t.json", .error_file = "/tmp/rf-x/error-5-2",
                    .run_dir = "/tmp/rf-run"};
  const std::vector<std::string> env = worker_environment(w, nullptr);
  // The environment strings must outlive the getter's answers: the lambda holds its copy.
  const rf::elastic::Getenv get = lookup(env);
  const WorkerEnv r = rf::elastic::read_worker_env(get);
  CHECK(r.launched());
  CHECK(r.coord == w.coord);
  CHECK(r.token == w.token);
  CHECK(r.slot == 5);
  CHECK(r.incarnation == 2);
  CHECK(r.world == 6);
  CHECK(r.node_rank == 1);
  CHECK(r.spare);
  CHECK(r.local_rank == 3);
  CHECK(r.local_world == 4);
  CHECK(r.job_ran);
  CHECK(r.inject == w.inject);
  CHECK(r.trace == w.trace);
  CHECK(r.error_file == w.error_file);
  CHECK(r.run_dir == w.run_dir);
}

TEST_CASE("a worker's environment: run by hand it is all defaults; a bad or missing value is named") {
  const WorkerEnv none = rf::elastic::read_worker_env(lookup({"PATH=/bin"}));
  CHECK_FALSE(none.launched());
  CHECK(none.slot == 0);
  CHECK(none.world == 1);
  CHECK(none.inject.empty());
  const auto refused = [](const std::vector<std::string>& env) {
    try {
      rf::elastic::read_worker_env(lookup(env));
    } catch (const rf::InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refused({"RINGFENCE_COORD=h:1", "RINGFENCE_SLOT=0", "RINGFENCE_INCARNATION=0"}).find("RINGFENCE_TOKEN") !=
        std::string::npos);
  CHECK(refused({"RINGFENCE_COORD=h:1", "RINGFENCE_TOKEN=t", "RINGFENCE_INCARNATION=0"}).find("RINGFENCE_SLOT") !=
        std::string::npos);
  CHECK(refused({"RINGFENCE_COORD=h:1", "RINGFENCE_TOKEN=t", "RINGFENCE_SLOT=x", "RINGFENCE_INCARNATION=0"})
            .find("RINGFENCE_SLOT='x'") != std::string::npos);
  CHECK(refused({"RINGFENCE_SPARE=yes"}).find("RINGFENCE_SPARE='yes' is not 0 or 1") != std::string::npos);
  CHECK(refused({"RINGFENCE_LOCAL_RANK=-1"}).find("RINGFENCE_LOCAL_RANK") != std::string::npos);
}
