// The environment `ringfence run` gives a worker (apps/ringfence/worker_env.h): the
// launcher's own without its RINGFENCE_* entries, then this worker's, the local rank and
// the local world (what train_mlp's --device cuda places itself by) among them.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "apps/ringfence/worker_env.h"

using rf::apps::worker_environment;
using rf::apps::WorkerEnv;

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
