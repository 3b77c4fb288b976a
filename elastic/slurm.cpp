#include "elastic/slurm.h"

#include <cctype>
#include <charconv>

#include "base/error.h"
#include "base/str.h"
#include "elastic/auth.h"

namespace rf::elastic {

namespace {

int parse_count(const char* name, const std::string& text, int min) {
  int x = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || x < min)
    throw rf::InvalidInput(rf::str("Slurm's ", name, "='", text, "' is not an integer >= ", min));
  return x;
}

std::string get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v ? v : "";
}

}  // namespace

int tasks_on_node(const std::string& list, int node_id) {
  // "2(x3),1": entries COUNT or COUNT(xREPEAT), in node order.
  int node = 0;
  size_t i = 0;
  while (i < list.size()) {
    const size_t comma = list.find(',', i);
    const std::string entry = list.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    const size_t paren = entry.find("(x");
    const int count = parse_count("SLURM_STEP_TASKS_PER_NODE", entry.substr(0, paren), 0);
    int repeat = 1;
    if (paren != std::string::npos) {
      if (entry.back() != ')') throw rf::InvalidInput(rf::str("Slurm's SLURM_STEP_TASKS_PER_NODE='", list, "' does not parse"));
      repeat = parse_count("SLURM_STEP_TASKS_PER_NODE", entry.substr(paren + 2, entry.size() - paren - 3), 1);
    }
    if (node_id < node + repeat) return count;
    node += repeat;
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  throw rf::InvalidInput(rf::str("Slurm's SLURM_STEP_TASKS_PER_NODE='", list, "' has no entry for node ", node_id));
}

std::optional<SlurmStep> read_slurm_step(const EnvLookup& env) {
  SlurmStep s;
  s.job_id = get(env, "SLURM_JOB_ID");
  s.step_id = get(env, "SLURM_STEP_ID");
  if (s.job_id.empty() || s.step_id.empty()) return std::nullopt;
  s.cluster = get(env, "SLURM_CLUSTER_NAME");
  s.user_id = get(env, "SLURM_JOB_UID");
  s.node_name = get(env, "SLURMD_NODENAME");
  s.step_nodes = get(env, "SLURM_STEP_NODELIST");
  if (s.step_nodes.empty()) throw rf::InvalidInput("Slurm's SLURM_STEP_NODELIST is not set in this job step");
  s.num_nodes = parse_count("SLURM_STEP_NUM_NODES", get(env, "SLURM_STEP_NUM_NODES"), 1);
  s.num_tasks = parse_count("SLURM_STEP_NUM_TASKS", get(env, "SLURM_STEP_NUM_TASKS"), 1);
  s.node_id = parse_count("SLURM_NODEID", get(env, "SLURM_NODEID"), 0);
  if (s.node_id >= s.num_nodes)
    throw rf::InvalidInput(rf::str("Slurm's SLURM_NODEID=", s.node_id, " is not below SLURM_STEP_NUM_NODES=", s.num_nodes));
  s.tasks_on_node = tasks_on_node(get(env, "SLURM_STEP_TASKS_PER_NODE"), s.node_id);
  if (const std::string cpus = get(env, "SLURM_CPUS_ON_NODE"); !cpus.empty())
    s.cpus_on_node = parse_count("SLURM_CPUS_ON_NODE", cpus, 1);
  return s;
}

int slurm_coord_port(const std::string& job_id) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: any job id string, not only digits
  for (unsigned char c : job_id) h = (h ^ c) * 1099511628211ull;
  return 29500 + static_cast<int>(h % 1000);
}

std::string slurm_job_token(const SlurmStep& s) {
  return hmac_sha256_hex("ringfence/1 slurm job", rf::str(s.cluster, "|", s.job_id, "|", s.user_id)).substr(0, 32);
}

SrunFailureFlags srun_failure_flags(const std::vector<std::string>& argv, const std::string& program,
                                    const char* env_kill_bad_exit, std::optional<bool> cluster_kill_on_bad_exit) {
  SrunFailureFlags f;
  f.no_kill = false;
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    const size_t slash = a.rfind('/');
    if (a.substr(slash == std::string::npos ? 0 : slash + 1) == program) break;  // the program's own arguments
    if (a == "-K" || a == "--kill-on-bad-exit") f.kill_on_bad_exit = true;
    else if (a.rfind("-K", 0) == 0 && a.size() == 3 && std::isdigit(static_cast<unsigned char>(a[2])))
      f.kill_on_bad_exit = a[2] != '0';
    else if (a.rfind("--kill-on-bad-exit=", 0) == 0) f.kill_on_bad_exit = a.substr(19) != "0";
    else if (a == "-k" || a == "--no-kill" || a.rfind("--no-kill=", 0) == 0) f.no_kill = a != "--no-kill=off";
    else if (a.size() > 2 && a[0] == '-' && a[1] != '-' && a.find('k') != std::string::npos &&
             a.find_first_not_of("-kvlQquXZsEOH") == std::string::npos)
      f.no_kill = true;  // -k among other toggles (-vk)
  }
  if (!f.kill_on_bad_exit && env_kill_bad_exit && *env_kill_bad_exit)
    f.kill_on_bad_exit = std::string(env_kill_bad_exit) != "0";
  if (!f.kill_on_bad_exit) f.kill_on_bad_exit = cluster_kill_on_bad_exit;
  return f;
}

namespace {

// What makes a step unfit for one launcher per node; throws rf::InvalidInput naming it.
void check_step(const RunOptions& o, const SlurmStep& s, const SrunFailureFlags& srun, const std::string& where) {
  if (!o.coord.empty() || o.nnodes != 1 || o.node_rank != 0)
    throw rf::InvalidInput(rf::str("inside ", where, " the allocation places the launchers: drop --coord, --nnodes and "
                                   "--node-rank (or give --no-slurm to place them by hand)"));
  if (s.tasks_on_node != 1 || s.num_tasks != s.num_nodes)
    throw rf::InvalidInput(rf::str(
        "ringfence run is one launcher per node, which starts the -n ", o.nprocs, " workers itself; ", where, " runs ",
        s.num_tasks, " task(s) on ", s.num_nodes, " node(s), ", s.tasks_on_node, " of them on ", s.node_name,
        ": start it with srun --ntasks-per-node=1 (with sbatch: --ntasks-per-node=1, or srun -N", s.num_nodes,
        " --ntasks-per-node=1)"));
  if (srun.kill_on_bad_exit.value_or(false))
    throw rf::InvalidInput(rf::str(
        where, " kills every task when one exits non-zero (srun -K1, --kill-on-bad-exit=1 or KillOnBadExit=1): one "
        "node's launcher giving up would stop every node's; run srun --kill-on-bad-exit=0"));
  if (o.spare_nodes >= s.num_nodes)
    throw rf::InvalidInput(rf::str("--spare-nodes ", o.spare_nodes, " leaves no node for the members: ", where,
                                   " has ", s.num_nodes, " node(s)"));
  const int world = o.nprocs * (s.num_nodes - o.spare_nodes);
  if (o.min_world > world)
    throw rf::InvalidInput(rf::str("--min-world ", o.min_world, " is larger than the world size ", world, " (",
                                   s.num_nodes - o.spare_nodes, " node(s) x -n ", o.nprocs, ")"));
  const int slots = world + o.spares * (s.num_nodes - o.spare_nodes) + o.nprocs * o.spare_nodes;
  for (const auto& f : o.inject)
    if (f.rank >= slots)
      throw rf::InvalidInput(rf::str("--inject '", f.to_string(), "': rank ", f.rank, " is not below the ", slots,
                                     " slot(s) of this job"));
}

// Where the coordinator is, set in `r`; returns it in words.
std::string place_coordinator(RunOptions& r, const SlurmStep& s, const std::string& first_node_addr) {
  const int port = r.listen_port ? r.listen_port : slurm_coord_port(s.job_id);
  if (!r.etcd.empty()) {
    if (r.job == RunOptions{}.job) r.job = "slurm-" + s.job_id;
    r.listen_port = 0;
    return rf::str("replicas in etcd, job '", r.job, "'");
  }
  if (s.node_id == 0) {
    r.listen_host = "0.0.0.0";
    r.listen_port = port;
    return rf::str("here, port ", port);
  }
  r.listen_port = 0;
  r.coord = rf::str(first_node_addr, ":", port);
  return r.coord;
}

}  // namespace

SlurmPlan plan_slurm(const RunOptions& o, const SlurmStep& s, const std::string& first_node_addr,
                     const SrunFailureFlags& srun, const std::string& token_given) {
  const std::string where = rf::str("Slurm job ", s.job_id, " step ", s.step_id);
  check_step(o, s, srun, where);
  SlurmPlan p;
  RunOptions& r = p.options;
  r = o;
  r.under_slurm = true;
  r.nnodes = s.num_nodes - o.spare_nodes;
  r.node_rank = s.node_id;
  r.spare_node = s.node_id >= r.nnodes;
  const int world = o.nprocs * r.nnodes;
  if (r.spare_node) {
    // After every member node's --spares: W + nnodes * spares, then -n per spare node.
    r.spares = o.nprocs;
    r.first_spare_slot = world + o.spares * r.nnodes + (s.node_id - r.nnodes) * o.nprocs;
  }
  const std::string coordinator = place_coordinator(r, s, first_node_addr);
  // Every node's launcher writes its own summary: "%n" becomes the node's index; without
  // it only the first node writes one (the job's outcome is the same on every node).
  if (const size_t at = r.summary_path.find("%n"); at != std::string::npos)
    r.summary_path.replace(at, 2, std::to_string(s.node_id));
  else if (s.node_id != 0)
    r.summary_path.clear();
  p.token = token_given.empty() ? slurm_job_token(s) : token_given;
  const int here = r.spare_node ? r.spares : o.nprocs + o.spares;
  const int first = r.spare_node ? r.first_spare_slot : s.node_id * o.nprocs;
  const int count = r.spare_node ? here : o.nprocs;
  p.summary = rf::str(where, ": node ", s.node_id, " of ", s.num_nodes, " (", s.node_name, "), ", count,
                      r.spare_node ? " spare" : "", " worker(s), slots ", first, "-", first + count - 1, "; world ",
                      world, "; coordinator ", coordinator);
  if (s.cpus_on_node > 0 && here > s.cpus_on_node)
    p.warnings.push_back(rf::str(here, " workers on this node share the ", s.cpus_on_node,
                                 " CPU(s) Slurm gave it (--cpus-per-task on srun gives more)"));
  if (s.node_id == 0 && !srun.kill_on_bad_exit)
    p.warnings.push_back("cannot see this step's srun (not on this node): make sure it has --kill-on-bad-exit=0 "
                         "and --no-kill, or a failure may end the whole step");
  else if (s.node_id == 0 && !srun.no_kill.value_or(false))
    p.warnings.push_back("this step's srun has no --no-kill (-k): Slurm may end the step when a node fails, where "
                         "ringfence would go on with the other nodes");
  return p;
}

}  // namespace rf::elastic
