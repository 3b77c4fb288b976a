#pragma once
// `ringfence run` inside a Slurm job step: what Slurm says about the step (its
// environment), and the launcher's layout decided from it, so the user gives no --nnodes,
// --node-rank or coordinator address. One launcher per node (`srun --ntasks-per-node=1
// ringfence run -n N ...`); the workers are its children (docs/slurm.md says why).
//
// Pure: read_slurm_step() takes a lookup of the environment, plan_slurm() the step, the
// options and the first node's address (the shell asks `scontrol` for it), and returns the
// options this launcher runs with and the warnings to print. Both throw rf::InvalidInput
// naming what does not fit, before anything starts.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "elastic/launch_options.h"

namespace rf::elastic {

// What Slurm tells every task of a step (srun's output environment variables).
struct SlurmStep {
  std::string job_id;       // SLURM_JOB_ID
  std::string step_id;      // SLURM_STEP_ID
  std::string cluster;      // SLURM_CLUSTER_NAME ("" when unset)
  std::string user_id;      // SLURM_JOB_UID ("" when unset)
  std::string node_name;    // SLURMD_NODENAME: this node, as Slurm names it
  std::string step_nodes;   // SLURM_STEP_NODELIST, compressed ("n[0-3]")
  int num_nodes = 0;        // SLURM_STEP_NUM_NODES
  int num_tasks = 0;        // SLURM_STEP_NUM_TASKS
  int node_id = 0;          // SLURM_NODEID: this node's index in the step
  int tasks_on_node = 0;    // tasks of this step on this node (SLURM_STEP_TASKS_PER_NODE, this node's entry)
  int cpus_on_node = 0;     // SLURM_CPUS_ON_NODE (0 when unset)
};

using EnvLookup = std::function<const char*(const char*)>;

// nullopt outside a Slurm job step (no SLURM_JOB_ID or no SLURM_STEP_ID: a batch script's
// own shell is no step). Throws rf::InvalidInput naming a variable that does not parse.
std::optional<SlurmStep> read_slurm_step(const EnvLookup& env);

// This node's entry of a tasks-per-node list ("2(x3),1": nodes 0-2 run 2 tasks, node 3 one).
// Throws rf::InvalidInput when the list has no entry for `node_id` or does not parse.
int tasks_on_node(const std::string& tasks_per_node, int node_id);

// The coordinator's port under Slurm unless --port says otherwise: one of 1000 ports above
// 29500 chosen by the job id, so two jobs that share a node rarely pick the same one.
int slurm_coord_port(const std::string& job_id);

// The job token when the user gave none: HMAC of the cluster, job id and user. It keeps
// one job's launchers and workers apart from another's; it is no secret from a user who
// can read the job's environment (docs/slurm.md: --token-file on shared storage for one).
std::string slurm_job_token(const SlurmStep& s);

// What the step's srun was told about failures. A task cannot see either in its
// environment; the first node's launcher reads srun's command line where srun runs on its
// node (`scontrol show step` names srun's host and pid), as a batch script's srun does.
struct SrunFailureFlags {
  std::optional<bool> kill_on_bad_exit;  // -K/--kill-on-bad-exit[=N], else SLURM_KILL_BAD_EXIT, else KillOnBadExit
  std::optional<bool> no_kill;           // -k/--no-kill
};

// Reads srun's argv up to its program (the first argument whose base name is `program`),
// srun's SLURM_KILL_BAD_EXIT (nullptr: unset) and the cluster's KillOnBadExit (nullopt:
// unknown).
SrunFailureFlags srun_failure_flags(const std::vector<std::string>& srun_argv, const std::string& program,
                                    const char* env_kill_bad_exit, std::optional<bool> cluster_kill_on_bad_exit);

struct SlurmPlan {
  RunOptions options;                 // with nnodes, node_rank, coord / listen, job, spare_node
  std::string token;                  // the job token the launcher uses
  std::string summary;                // one line: what the launcher does here
  std::vector<std::string> warnings;  // to print before the job starts
};

// `first_node_addr`: where the other nodes reach the first node of the step (its NodeAddr).
// `srun`: the step's failure flags where known (the first node; the others pass what they
// know, and only the first node warns). Refuses: a task count other than one per node,
// --nnodes / --node-rank / --coord given by hand, more --spare-nodes than nodes, a step
// that kills every task when one exits non-zero (one node's launcher giving up would end
// every node's).
SlurmPlan plan_slurm(const RunOptions& o, const SlurmStep& s, const std::string& first_node_addr,
                     const SrunFailureFlags& srun, const std::string& token_given);

}  // namespace rf::elastic
