"""The Slurm test cluster itself (label slurm): three nodes come up IDLE; srun places two
tasks on each node, each seeing its own host name; a batch job running srun completes;
a lost node goes DOWN and returns IDLE when its slurmd comes back; a lab whose owner was
SIGKILLed is removed by the next one; and closing the lab leaves no namespace, daemon or
temp dir behind.

It prints, once, the SLURM_* environment a task of `srun --ntasks-per-node=1` inside a
batch job sees (for whoever writes a launcher on top of Slurm), and what sacct answers
(without slurmdbd: "accounting storage is disabled"; `sacct -c`, from the jobcomp file,
shows the job but not its steps).

Exit 77 (ctest: skipped) with the reason when this machine cannot run it.
"""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import slurmlab  # noqa: E402
from rf_testlib import check, exit_on_failures, failures  # noqa: E402

DEADLINE_S = 30  # for each condition waited on


def our_processes(tmp):
    """Live processes whose command line names this lab's temp dir (its daemons)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if tmp in cmd:
            out.append(f"{pid} {cmd}")
    return out


def check_srun_placement(sl):
    r = sl.run(["srun", "-N3", "-n6", "--ntasks-per-node=2", "sh", "-c", "echo $(hostname) $SLURM_PROCID $SLURM_NODEID"],
               timeout=DEADLINE_S)
    check(r.returncode == 0, f"srun -N3 -n6 exits 0 (got {r.returncode}: {r.stderr.strip()})")
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()]
    hosts = sorted(row[0] for row in rows)
    check(hosts == ["n0", "n0", "n1", "n1", "n2", "n2"], f"two tasks on each of n0, n1, n2 (got {hosts})")
    check(sorted(int(row[1]) for row in rows) == list(range(6)), f"task ranks 0..5 (got {rows})")
    check(all(row[0] == f"n{row[2]}" for row in rows), f"each task's SLURM_NODEID is its node's (got {rows})")


def check_batch_job(sl):
    """A batch job whose srun prints, per task, its environment and what scontrol tells it."""
    script = """#!/bin/sh
srun -N3 -n3 --ntasks-per-node=1 sh -c '
  if [ "$SLURM_PROCID" = 0 ]; then env | grep -E "^SLURM" | sort | sed "s/^/ENV /"; fi
  echo "HOSTNAMES $SLURM_PROCID $(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr "\\n" " ")"
  echo "NODEADDR $SLURM_PROCID $(scontrol show node "$SLURMD_NODENAME" -o | grep -o "NodeAddr=[^ ]*")"'
"""
    t = time.monotonic()
    job = sl.sbatch(script, ["-N3", "--ntasks-per-node=1"])
    state = sl.wait_job(job, DEADLINE_S)
    print(f"batch job {job}: {state} after {time.monotonic() - t:.1f} s")
    check(state == "COMPLETED", f"the batch job completes (state {state}; output: {sl.job_output(job)})")
    out = sl.job_output(job)
    env = [line[4:] for line in out.splitlines() if line.startswith("ENV ")]
    print("the environment a task of `srun -N3 -n3 --ntasks-per-node=1` sees inside `sbatch -N3`:")
    for line in env:
        print("   ", line)
    keys = {line.split("=", 1)[0] for line in env}
    for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODEID", "SLURM_PROCID", "SLURM_STEP_NODELIST",
              "SLURM_LAUNCH_NODE_IPADDR", "SLURMD_NODENAME", "SLURM_NTASKS", "SLURM_STEP_TASKS_PER_NODE"):
        check(k in keys, f"a task sees {k}")
    for rank in range(3):
        check(f"HOSTNAMES {rank} n0 n1 n2" in out, f"scontrol show hostnames in task {rank} lists n0 n1 n2")
        check(f"NODEADDR {rank} NodeAddr={sl.lab.addr(rank)}" in out,
              f"scontrol show node in task {rank} shows its NodeAddr {sl.lab.addr(rank)}")
    recs = [rec for rec in sl.completions() if rec.get("JobId") == str(job)]
    check(len(recs) == 1 and recs[0].get("JobState") == "COMPLETED",
          f"the jobcomp file has the job as COMPLETED (got {recs})")
    return job


def check_sacct(sl, job):
    r = sl.run(["sacct", "-j", str(job), "-P", "-o", "JobID,JobName,State,ExitCode,NodeList"], timeout=DEADLINE_S)
    if r.returncode == 0 and f"{job}.0" in r.stdout:
        print(f"sacct shows the job's steps:\n{r.stdout}")
    else:
        # Known: Slurm 22.05 has only accounting_storage/none and /slurmdbd (FINDINGS.md).
        print(f"sacct without slurmdbd: rc {r.returncode}, {(r.stdout + r.stderr).strip()!r} (expected)")
        check("disabled" in r.stderr, f"sacct says accounting storage is disabled (got {r.stderr.strip()!r})")
    # sacct -c reads the jobcomp file: the job, its state and exit code, no steps.
    r = sl.run(["sacct", "-c", "-j", str(job), "-P", "-n", "-o", "JobID,State,ExitCode,NodeList"], timeout=DEADLINE_S)
    print(f"sacct -c -j {job}: rc {r.returncode}, {r.stdout.strip()!r}")
    check(f"{job}|COMPLETED|0:0|n[0-2]" in r.stdout, f"sacct -c shows the job COMPLETED on n[0-2] (got {r.stdout!r})")


def check_node_lost_and_back(sl):
    t = time.monotonic()
    sl.kill_node(2)
    check(not sl.node_pids(2), f"no process left on n2 after kill_node (got {sl.node_pids(2)})")
    s = sl.wait_node_state(2, {"DOWN", "NOT_RESPONDING"}, DEADLINE_S)
    print(f"n2 killed: {s} after {time.monotonic() - t:.1f} s")
    check(s is not None, f"n2 goes DOWN or NOT_RESPONDING within {DEADLINE_S} s (state {sl.node_state(2)})")
    s = sl.wait_node_state(2, {"DOWN"}, DEADLINE_S)
    print(f"n2 DOWN after {time.monotonic() - t:.1f} s: {s}")
    check(s is not None, f"n2 goes DOWN within {DEADLINE_S} s (state {sl.node_state(2)})")
    t = time.monotonic()
    sl.restart_node(2)
    s = sl.wait_node_state(2, {"IDLE"}, DEADLINE_S)
    print(f"n2 restarted: {s} after {time.monotonic() - t:.1f} s")
    check(s == "IDLE", f"n2 returns IDLE within {DEADLINE_S} s (state {sl.node_state(2)})")
    r = sl.run(["srun", "-N3", "hostname"], timeout=DEADLINE_S)
    check(sorted(r.stdout.split()) == ["n0", "n1", "n2"], f"srun -N3 runs on all nodes again (got {r.stdout!r})")


def check_stale_sweep():
    """A lab whose owner is SIGKILLed (no cleanup runs) is removed by the next sweep."""
    code = ("import sys, time; sys.path.insert(0, %r); import slurmlab; sl = slurmlab.SlurmLab(1); "
            "print(sl.tmp, flush=True); time.sleep(600)" % HERE)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        tmp = p.stdout.readline().strip()
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    check(tmp.startswith("/"), f"the owner started a lab (got {tmp!r})")
    if not tmp.startswith("/"):
        return
    check(bool(our_processes(tmp)), "the dead owner's daemons outlive it (the case the sweep is for)")
    slurmlab.sweep_stale()
    check(not our_processes(tmp), f"no daemon of the dead owner's lab after the sweep (got {our_processes(tmp)})")
    check(not os.path.exists(tmp), f"the dead owner's temp dir {tmp} is removed")
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check(f"rf{p.pid}-" not in ns, f"the dead owner's namespaces are removed (got {ns!r})")
    check(not os.path.exists(os.path.join(slurmlab.OWNERS, f"{p.pid}.json")), "the dead owner's record is removed")


def main():
    why = slurmlab.unavailable_reason()
    if why:
        print(f"SKIPPED: no Slurm test cluster here: {why}")
        return 77
    t0 = time.monotonic()
    sl = slurmlab.SlurmLab(3)
    print(f"cluster of 3 nodes up (all IDLE) in {time.monotonic() - t0:.1f} s; its files in {sl.tmp}")
    try:
        check_srun_placement(sl)
        job = check_batch_job(sl)
        check_sacct(sl, job)
        check_node_lost_and_back(sl)
    finally:
        if failures:
            sl.keep = True  # a failed run keeps the daemons' logs for a look
        sl.close()
    left = sl.leftovers()
    check(not left["netns"], f"no namespace of the lab left (got {left['netns']})")
    check(not left["pids"], f"no daemon of the lab left (got {left['pids']})")
    if not sl.keep:
        check(not left["tmp"], f"the temp dir is removed (got {left['tmp']})")
        check(not our_processes(sl.tmp), f"no process names the lab's temp dir (got {our_processes(sl.tmp)})")
    else:
        print(f"logs kept in {sl.tmp}/log")
    check_stale_sweep()
    print(f"total {time.monotonic() - t0:.1f} s")
    exit_on_failures("the Slurm lab: placement, a batch job, a lost node and back, total cleanup")
    return 0


if __name__ == "__main__":
    sys.exit(main())
