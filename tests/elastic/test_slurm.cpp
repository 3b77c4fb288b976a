// The launcher's layout inside a Slurm job step (elastic/slurm.h), from the environment a
// task of `srun -N3 --ntasks-per-node=1` sees.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "base/error.h"
#include "base/str.h"
#include "elastic/slurm.h"

using namespace rf::elastic;

namespace {

std::map<std::string, std::string> step_env(int node_id, int nodes = 3, const std::string& tasks = "1(x3)") {
  const std::string name = rf::str("n", node_id);
  return {{"SLURM_JOB_ID", "41"},          {"SLURM_STEP_ID", "0"},
          {"SLURM_CLUSTER_NAME", "lab"},   {"SLURM_JOB_UID", "0"},
          {"SLURMD_NODENAME", name},
          {"SLURM_STEP_NODELIST", "n[0-2]"}, {"SLURM_STEP_NUM_NODES", std::to_string(nodes)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(nodes)}, {"SLURM_NODEID", std::to_string(node_id)},
          {"SLURM_STEP_TASKS_PER_NODE", tasks}, {"SLURM_CPUS_ON_NODE", "4"}};
}

EnvLookup lookup(const std::map<std::string, std::string>& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

SlurmStep step(int node_id, int nodes = 3) {
  auto env = step_env(node_id, nodes, rf::str("1(x", nodes, ")"));
  return *read_slurm_step(lookup(env));
}

RunOptions run_n(int n) {
  RunOptions o;
  o.nprocs = n;
  o.program = {"train_mlp"};
  return o;
}

const SrunFailureFlags kSafe{.kill_on_bad_exit = false, .no_kill = true};

std::string refusal(const RunOptions& o, const SlurmStep& s, SrunFailureFlags srun = kSafe) {
  try {
    plan_slurm(o, s, "10.0.0.10", srun, "");
  } catch (const rf::InvalidInput& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("outside a job step there is no Slurm layout") {
  std::map<std::string, std::string> none;
  CHECK_FALSE(read_slurm_step(lookup(none)));
  // A batch script's own shell has a job but is no step of srun.
  auto batch = step_env(0);
  batch.erase("SLURM_STEP_ID");
  CHECK_FALSE(read_slurm_step(lookup(batch)));
}

TEST_CASE("a step's environment, read") {
  auto env = step_env(2);
  auto s = read_slurm_step(lookup(env));
  REQUIRE(s);
  CHECK(s->job_id == "41");
  CHECK(s->node_name == "n2");
  CHECK(s->num_nodes == 3);
  CHECK(s->node_id == 2);
  CHECK(s->tasks_on_node == 1);
  CHECK(s->cpus_on_node == 4);
  env["SLURM_NODEID"] = "x";
  CHECK_THROWS_WITH_AS(read_slurm_step(lookup(env)), "Slurm's SLURM_NODEID='x' is not an integer >= 0", rf::InvalidInput);
  env["SLURM_NODEID"] = "3";
  CHECK_THROWS_AS(read_slurm_step(lookup(env)), rf::InvalidInput);
}

TEST_CASE("tasks per node: Slurm's compressed list") {
  CHECK(tasks_on_node("1(x3)", 2) == 1);
  CHECK(tasks_on_node("2(x3),1", 2) == 2);
  CHECK(tasks_on_node("2(x3),1", 3) == 1);
  CHECK(tasks_on_node("4,2,1", 1) == 2);
  CHECK_THROWS_AS(tasks_on_node("2(x3)", 3), rf::InvalidInput);
  CHECK_THROWS_AS(tasks_on_node("2(x", 0), rf::InvalidInput);
  CHECK_THROWS_AS(tasks_on_node("", 0), rf::InvalidInput);
}

TEST_CASE("the first node runs the coordinator; the others connect to its address") {
  const auto first = plan_slurm(run_n(2), step(0), "", kSafe, "");
  CHECK(first.options.nnodes == 3);
  CHECK(first.options.node_rank == 0);
  CHECK(first.options.listen_host == "0.0.0.0");
  CHECK(first.options.listen_port == slurm_coord_port("41"));
  CHECK(first.options.coord.empty());
  CHECK(first.options.under_slurm);  // its workers ignore the step's SIGTERM
  const auto other = plan_slurm(run_n(2), step(2), "10.0.0.10", kSafe, "");
  CHECK(other.options.node_rank == 2);
  CHECK(other.options.coord == "10.0.0.10:" + std::to_string(slurm_coord_port("41")));
  CHECK(other.options.listen_port == 0);  // no coordinator here
  // Every node derives the same token; another job, another token.
  CHECK(first.token == other.token);
  CHECK(first.token.size() == 32);
  SlurmStep job42 = step(0);
  job42.job_id = "42";
  CHECK(slurm_job_token(job42) != first.token);
  CHECK(plan_slurm(run_n(2), step(1), "10.0.0.10", kSafe, "given").token == "given");
  CHECK(other.summary.find("node 2 of 3 (n2), 2 worker(s), slots 4-5; world 6; coordinator 10.0.0.10:") !=
        std::string::npos);
}

TEST_CASE("--summary: %n is the node's index; without it only the first node writes one") {
  RunOptions o = run_n(2);
  o.summary_path = "out/summary-%n.json";
  CHECK(plan_slurm(o, step(2), "10.0.0.10", kSafe, "").options.summary_path == "out/summary-2.json");
  o.summary_path = "summary.json";
  CHECK(plan_slurm(o, step(0), "", kSafe, "").options.summary_path == "summary.json");
  CHECK(plan_slurm(o, step(1), "10.0.0.10", kSafe, "").options.summary_path.empty());
}

TEST_CASE("--coord-port and --etcd place the coordinator otherwise") {
  RunOptions o = run_n(2);
  o.listen_port = 31000;
  CHECK(plan_slurm(o, step(1), "10.0.0.10", kSafe, "").options.coord == "10.0.0.10:31000");
  RunOptions e = run_n(2);
  e.etcd = "http://10.0.0.1:2379";
  const auto p = plan_slurm(e, step(0), "", kSafe, "");
  CHECK(p.options.job == "slurm-41");
  CHECK(p.options.listen_port == 0);  // the replicas are the coordinator
  CHECK(p.options.coord.empty());
}

TEST_CASE("spare nodes: the last K nodes run -n spares each, numbered after every member's") {
  RunOptions o = run_n(2);
  o.spare_nodes = 1;
  const auto member = plan_slurm(o, step(2, 4), "10.0.0.10", kSafe, "");
  CHECK(member.options.nnodes == 3);
  CHECK_FALSE(member.options.spare_node);
  const auto spare = plan_slurm(o, step(3, 4), "10.0.0.10", kSafe, "");
  CHECK(spare.options.spare_node);
  CHECK(spare.options.spares == 2);
  CHECK(spare.options.first_spare_slot == 6);
  o.spares = 1;  // one more spare on each member node: slots 6-8, the spare node's 9-10
  CHECK(plan_slurm(o, step(3, 4), "10.0.0.10", kSafe, "").options.first_spare_slot == 9);
  o.spare_nodes = 4;
  CHECK(refusal(o, step(0, 4)) == "--spare-nodes 4 leaves no node for the members: Slurm job 41 step 0 has 4 node(s)");
}

TEST_CASE("a step that does not fit is refused before anything starts") {
  auto env = step_env(0, 3, "2(x3)");
  env["SLURM_STEP_NUM_TASKS"] = "6";
  const SlurmStep two_per_node = *read_slurm_step(lookup(env));
  CHECK(refusal(run_n(2), two_per_node).find("one launcher per node, which starts the -n 2 workers itself; Slurm job 41 "
                                             "step 0 runs 6 task(s) on 3 node(s), 2 of them on n0: start it with srun "
                                             "--ntasks-per-node=1") == std::string("ringfence run is ").size());
  CHECK(refusal(run_n(2), step(0), {.kill_on_bad_exit = true, .no_kill = true})
            .find("kills every task when one exits non-zero") != std::string::npos);
  RunOptions by_hand = run_n(2);
  by_hand.nnodes = 3;
  CHECK(refusal(by_hand, step(0)).find("the allocation places the launchers") != std::string::npos);
  RunOptions too_many = run_n(2);
  too_many.min_world = 7;
  CHECK(refusal(too_many, step(0)) == "--min-world 7 is larger than the world size 6 (3 node(s) x -n 2)");
  RunOptions inject = run_n(2);
  inject.inject.push_back(parse_fault_spec("kill:rank=6:step=3"));
  CHECK(refusal(inject, step(0)).find("rank 6 is not below the 6 slot(s) of this job") != std::string::npos);
}

TEST_CASE("warnings: too few CPUs; srun unseen or without --no-kill (the first node says it)") {
  auto p = plan_slurm(run_n(6), step(0), "", {}, "");
  REQUIRE(p.warnings.size() == 2);
  CHECK(p.warnings[0] == "6 workers on this node share the 4 CPU(s) Slurm gave it (--cpus-per-task on srun gives more)");
  CHECK(p.warnings[1].find("cannot see this step's srun") == 0);
  CHECK(plan_slurm(run_n(2), step(1), "10.0.0.10", {}, "").warnings.empty());
  const auto no_k = plan_slurm(run_n(2), step(0), "", {.kill_on_bad_exit = false, .no_kill = false}, "");
  REQUIRE(no_k.warnings.size() == 1);
  CHECK(no_k.warnings[0].find("no --no-kill (-k)") != std::string::npos);
  CHECK(plan_slurm(run_n(2), step(0), "", kSafe, "").warnings.empty());
}

TEST_CASE("srun's failure flags, from its command line, then its environment, then the cluster's default") {
  using V = std::vector<std::string>;
  auto flags = [](const V& argv, const char* env = nullptr, std::optional<bool> cluster = std::nullopt) {
    return srun_failure_flags(argv, "ringfence", env, cluster);
  };
  CHECK(flags({"srun", "-K1", "-N3", "ringfence", "run"}).kill_on_bad_exit == true);
  CHECK(flags({"srun", "-K", "ringfence"}).kill_on_bad_exit == true);
  CHECK(flags({"srun", "--kill-on-bad-exit", "ringfence"}).kill_on_bad_exit == true);
  CHECK(flags({"srun", "--kill-on-bad-exit=0", "ringfence"}).kill_on_bad_exit == false);
  CHECK(flags({"srun", "-K0", "ringfence"}, "1", true).kill_on_bad_exit == false);  // the command line wins
  CHECK(flags({"srun", "-N3", "ringfence"}, "1").kill_on_bad_exit == true);         // then srun's environment
  CHECK(flags({"srun", "-N3", "ringfence"}, nullptr, false).kill_on_bad_exit == false);  // then KillOnBadExit
  CHECK_FALSE(flags({"srun", "-N3", "ringfence"}).kill_on_bad_exit.has_value());
  // ringfence's own arguments are not srun's.
  CHECK_FALSE(flags({"srun", "/opt/bin/ringfence", "run", "-K1", "-k"}).kill_on_bad_exit.has_value());
  CHECK(flags({"srun", "/opt/bin/ringfence", "run", "-k"}).no_kill == false);
  CHECK(flags({"srun", "-k", "ringfence"}).no_kill == true);
  CHECK(flags({"srun", "--no-kill", "ringfence"}).no_kill == true);
  CHECK(flags({"srun", "-lk", "ringfence"}).no_kill == true);
  CHECK(flags({"srun", "--no-kill=off", "ringfence"}).no_kill == false);
}
