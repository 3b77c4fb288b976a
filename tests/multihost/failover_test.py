"""The control plane on etcd across test hosts (label multihost, etcd): three hosts with two
workers each and one etcd member each (a 3-member cluster), and two `ringfence coord --etcd`
replicas on hosts 3 and 4. Every case runs at default settings (leader lease 3 s, worker
lease 1 s) and ends DONE with every step applied exactly once and the final state bitwise
equal to the failure-free run of the same job under one coordinator:

  leader_killed_training   the leading replica is SIGKILLed while the job trains: the
                           standby takes the lead within about 2 leases, the workers rejoin
                           it without a restart, and the generation recovers in place.
  leader_killed_recovery   a worker is killed while its launcher is held (SIGSTOP), so the
                           round to replace it stays open; the leader is killed inside that
                           round; the standby continues the recovery (the launcher, released,
                           restarts the worker: the only restart).
  etcd_member_killed       the member leading etcd's raft group is killed: the job goes on.
  coord_host_partitioned   the leader's host loses its link: it stops serving within its
                           lease, the standby takes over, the old leader issues no generation
                           after that (no two generations run at once), and after the heal it
                           stands by again.
  coord_host_partitioned_at_leave
                           the same cut after the last step, while every worker waits to send
                           its leave (phase=leave): each is fenced before its leave is
                           answered, joins the new leader's generation, which has nothing left
                           to train, and leaves there; no worker restarts.

  failover_test.py BUILD_BIN_DIR CASE     exit 0 passed, 1 failed, 77 skipped
"""
import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import control  # noqa: E402
import jobs  # noqa: E402
import netlab  # noqa: E402
from rf_testlib import check  # noqa: E402

# The faults fire once the audit log shows FAULT_STEP applied, never on the launchers' live
# line: that comes about once a second, and on a fast machine the 120 steps this job had took
# 1.1 s, the first live line was the DONE line and the fault landed on a finished job. Here
# (2 cores) a step takes about 15 ms: after FAULT_STEP about 4 s of steps remain, 2 s on a
# machine twice as fast, against the audit poll's tens of ms. fired_mid_run fails a case
# whose fault landed after the job's last step instead of letting it pass vacuously.
STEPS = 300
FAULT_STEP = 40
WORKER = ["--synthetic", "8192"]  # 51 steps an epoch x 10 epochs (jobs.run_job): more than STEPS
LEADER_LEASE_S = 3.0
WORKER_HOSTS, REPLICA_HOSTS = [0, 1, 2], [3, 4]


def job_done(job, what):
    check(len(job.codes) == 3, f"{what}: three launchers ran (got {job.codes})")
    jobs.check_done(job, what, STEPS)


same_digest = jobs.same_digest


def one_generation_at_a_time(job, what):
    """The generation of the applied steps never goes back: no step of an older generation is
    applied after one of a newer (two generations never apply steps at once)."""
    applies = sorted((r["s"], r["g"]) for rs in job.audits().values() for r in rs if r["event"] == "apply")
    back = [(s, g, s2, g2) for (s, g), (s2, g2) in zip(applies, applies[1:]) if g2 < g]
    check(not back, f"{what}: applied steps' generations never go back (first: {back[:3]})")


def ended_well(job, ref, what, restart_free=(0, 1, 2), evictions=True):
    """DONE exactly once, bitwise the failure-free run, no restart on `restart_free` hosts, and
    the applied steps' generations never going back. evictions=False where a replica's event
    log is no measure of cost (a leader cut off evicts every member in memory before it learns
    it lost the lead, and commits none of it)."""
    job_done(job, what)
    same_digest(job, ref, what)
    no_restarts(job, what, restart_free, evictions)
    one_generation_at_a_time(job, what)


def no_restarts(job, what, hosts=(0, 1, 2), evictions=True):
    for i in hosts:
        check(re.search(r"job DONE \(exit 0\): generation \d+, 0 restart\(s\)", job.text(i)),
              f"{what}: host {i}'s launcher restarted no worker")
    if hosts == (0, 1, 2) and evictions:  # nothing failed on a host: nobody failed, evicted or started from step 0
        jobs.check_cost(job, what, restarts=0)


def took_over(ctl, old, at_us, what):
    """The other replica took the lead after `at_us`; returns the milliseconds it took."""
    new = 1 - old
    leading = [e for e in ctl.events_of(new, "leading") if e["ts_us"] > at_us]
    check(leading, f"{what}: replica c{new} took the lead")
    if not leading:
        return None
    ms = (leading[0]["ts_us"] - at_us) / 1000
    running = [e for e in ctl.events_of(new, "running") if e["ts_us"] > leading[0]["ts_us"]]
    resume_ms = (running[0]["ts_us"] - at_us) / 1000 if running else None
    print(f"{what}: c{new} led {ms:.0f} ms after the fault (leader lease {LEADER_LEASE_S:.0f} s); training "
          f"resumed (the next generation RUNNING) after {resume_ms} ms")
    check(ms <= 2 * LEADER_LEASE_S * 1000 + 500, f"{what}: the standby led within about 2 leases ({ms:.0f} ms)")
    check(running, f"{what}: a generation runs under the new leader")
    return {"failover_ms": round(ms), "resume_ms": round(resume_ms) if resume_ms else None}


def at_step(step):
    """Waits until some worker's audit record says it applied `step` (exact to the step)."""
    def wait(job):
        return jobs.wait_for(lambda: jobs.step_applied(job, step), f"{job.name}: step {step} applied", 90)
    return wait


def fired_mid_run(job, at_us, what, new_generation=True):
    """The fault at `at_us` (wall clock, as the audit's ts_us) landed while the job trained:
    steps were applied after it, in a generation newer than any applied before it where the
    fault ends one (new_generation). A job that finished before its fault fails here instead
    of passing its other checks on a control plane that had nothing left to do."""
    applies = [r for rs in job.audits().values() for r in rs if r["event"] == "apply"]
    if at_us is None:
        check(False, f"{what}: the fault never fired")
        return
    before = [r for r in applies if r["ts_us"] <= at_us]
    after = [r for r in applies if r["ts_us"] > at_us]
    last_g = max((r["g"] for r in before), default=0)
    later = [r for r in after if r["g"] > last_g] if new_generation else after
    first = min((r["ts_us"] for r in applies), default=at_us)
    end = max((r["ts_us"] for r in applies), default=at_us)
    print(f"{what}: the fault landed after step {max((r['s'] for r in before), default=-1)} of {STEPS} "
          f"(generation {last_g}), {(at_us - first) / 1e6:.2f} s after the first step; "
          f"{len({r['s'] for r in later})} step(s) applied after it{' in a newer generation' if new_generation else ''}, "
          f"the last {(end - at_us) / 1e6:.2f} s after it")
    check(later, f"{what}: steps were applied after the fault{' in a newer generation' if new_generation else ''} "
                 f"(it landed before the job's last step)")


def run(bindir, tmp, lab, etcd, name, during, launcher_args=None):
    ctl = control.Replicas(etcd, REPLICA_HOSTS, job_name=name)
    job = jobs.run_job(bindir, tmp, name, steps=STEPS, worker_args=WORKER, lab=lab, control=ctl,
                       during=lambda lab_, job_, procs: during(job_, procs, ctl), deadline_s=150,
                       launcher_args=launcher_args)
    job.replica_codes = ctl.wait_exit(30)
    job.logs_extra = ctl.logs
    return job, ctl


def case_leader_killed_training(bindir, tmp, lab, etcd, ref):
    out = {}

    def kill_leader(job, procs, ctl):
        at_step(FAULT_STEP)(job)
        out["leader"] = ctl.leader()
        out["at_us"] = time.time() * 1e6
        lab.kill(ctl.procs[out["leader"]])
    job, ctl = run(bindir, tmp, lab, etcd, "killtrain", kill_leader)
    what = "leader killed while training"
    fired_mid_run(job, out.get("at_us"), what)
    ended_well(job, ref, what)
    figures = took_over(ctl, out["leader"], out["at_us"], what)
    check(len(control.leader_changes(job.text(0))) == 2, f"{what}: the summary names both leaders")
    return job, figures


def worker_pids(launcher_pid):
    """The worker processes a launcher started (its children)."""
    pids = []
    for tid in os.listdir(f"/proc/{launcher_pid}/task"):
        with open(f"/proc/{launcher_pid}/task/{tid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    return pids


def case_leader_killed_recovery(bindir, tmp, lab, etcd, ref):
    out = {}

    def kill_in_recovery(job, procs, ctl):
        at_step(FAULT_STEP)(job)
        leader = out["leader"] = ctl.leader()
        revokes = len(ctl.events_of(leader, "revoke"))
        os.kill(procs[2].pid, signal.SIGSTOP)  # host 2's launcher cannot restart the worker yet
        try:
            workers = worker_pids(procs[2].pid)
            check(workers, "host 2's launcher has a worker to kill (the job still trains)")
            if not workers:
                return
            os.kill(workers[0], signal.SIGKILL)
            # The round that replaces it waits for W = 6 while the launcher is held.
            jobs.wait_for(lambda: len(ctl.events_of(leader, "revoke")) > revokes, "the worker's failure revoked", 20)
            out["at_us"] = time.time() * 1e6
            lab.kill(ctl.procs[leader])
        finally:
            os.kill(procs[2].pid, signal.SIGCONT)
    job, ctl = run(bindir, tmp, lab, etcd, "killrecov", kill_in_recovery)
    what = "leader killed during a recovery"
    fired_mid_run(job, out.get("at_us"), what)
    ev = ctl.event_lines(out["leader"])
    last_revoke = max((e["ts_us"] for e in ev if e["event"] == "revoke"), default=0)
    check(last_revoke and not any(e["event"] == "running" and e["ts_us"] > last_revoke for e in ev),
          f"{what}: the old leader died with its round open (a revoke, no running after it)")
    ended_well(job, ref, what, restart_free=(0, 1))
    check(re.search(r"job DONE \(exit 0\): generation \d+, 1 restart\(s\)", job.text(2)),
          f"{what}: host 2 restarted the killed worker once")
    jobs.check_cost(job, what, restarts=1, faulty=(4, 5))  # a worker of host 2
    figures = took_over(ctl, out["leader"], out["at_us"], what) if "at_us" in out else None
    return job, figures


def case_etcd_member_killed(bindir, tmp, lab, etcd, ref):
    out = {}

    def kill_member(job, procs, ctl):
        at_step(FAULT_STEP)(job)
        out["member"] = etcd.raft_leader()
        check(out["member"] is not None, "etcd names its raft leader")
        out["at_us"] = time.time() * 1e6
        etcd.kill(out["member"] if out["member"] is not None else WORKER_HOSTS[0])
    job, ctl = run(bindir, tmp, lab, etcd, "etcdkill", kill_member)
    what = f"etcd member (raft leader, host {out.get('member')}) killed"
    fired_mid_run(job, out.get("at_us"), what, new_generation=False)  # it costs the job nothing
    job_done(job, what)
    same_digest(job, ref, what)
    no_restarts(job, what)
    changes = control.leader_changes(job.text(0))
    print(f"{what}: coordinator leaders {changes}")
    return job, {"leader_changes": len(changes) - 1}


def case_coord_host_partitioned(bindir, tmp, lab, etcd, ref):
    out = {}

    def cut_leader_host(job, procs, ctl):
        at_step(FAULT_STEP)(job)
        leader = out["leader"] = ctl.leader()
        out["at_us"] = time.time() * 1e6
        lab.link_down(REPLICA_HOSTS[leader])
        jobs.wait_for(lambda: "lost the lead" in ctl.text(leader), "the cut-off leader gives up the lead", 20)
        jobs.wait_for(lambda: ctl.events_of(1 - leader, "running"), "a generation runs under the new leader", 30)
        lab.link_up(REPLICA_HOSTS[leader])
    job, ctl = run(bindir, tmp, lab, etcd, "cutleader", cut_leader_host)
    what = "coordinator host partitioned"
    fired_mid_run(job, out.get("at_us"), what)
    ended_well(job, ref, what, evictions=False)
    figures = took_over(ctl, out["leader"], out["at_us"], what)
    old, new = out["leader"], 1 - out["leader"]
    lost = ctl.events_of(old, "lost_leadership")
    check(lost, f"{what}: the old leader logged that it lost the lead")
    # Cut off, the old leader may still decide in memory (its members' leases run out), but
    # nothing it could not commit to etcd leaves it: its committed generations all come
    # before the new leader's first.
    first_new = min((e["g"] for e in ctl.events_of(new, "leading")), default=None)
    committed_old = max((e["g"] for e in ctl.events_of(old, "commit")), default=0)
    check(first_new is not None and committed_old < first_new,
          f"{what}: the old leader committed no generation at or after the new leader's first "
          f"({committed_old} < {first_new})")
    if lost:
        stop_ms = (lost[0]["ts_us"] - out["at_us"]) / 1000
        print(f"{what}: the old leader stopped serving {stop_ms:.0f} ms after the cut")
        check(stop_ms <= LEADER_LEASE_S * 1000, f"{what}: the old leader stopped within its lease ({stop_ms:.0f} ms)")
    check("standing by" in ctl.text(old).split("lost the lead")[-1], f"{what}: after the heal the old leader stands by")
    check(job.replica_codes == [0, 0], f"{what}: both replicas end cleanly once the job is over (got {job.replica_codes})")
    return job, figures


def case_coord_host_partitioned_at_leave(bindir, tmp, lab, etcd, ref):
    last = STEPS - 1
    # Every rank holds its leave for 200 of its step times (seconds): the cut lands while all
    # six wait, whatever the machine's speed (the test waits for all six to be waiting).
    hold = {h: [a for r in (2 * h, 2 * h + 1) for a in ("--inject", f"slow:rank={r}:step={last}:phase=leave:factor=200")]
            for h in WORKER_HOSTS}

    def waiting(job):
        return {r["slot"] for rs in job.audits().values() for r in rs if r["event"] == "inject" and r["s"] == last}

    def cut_at_leave(job, procs, ctl):
        jobs.wait_for(lambda: len(waiting(job)) == 6, "every worker waits to send its leave", 90)
        leader = ctl.leader()
        lab.link_down(REPLICA_HOSTS[leader])
        jobs.wait_for(lambda: ctl.events_of(1 - leader, "running"), "a generation runs under the new leader", 30)
        lab.link_up(REPLICA_HOSTS[leader])
    job, ctl = run(bindir, tmp, lab, etcd, "cutleave", cut_at_leave, launcher_args=hold)
    what = "coordinator host partitioned at the leave"
    ended_well(job, ref, what, evictions=False)
    rejoined = sum(job.text(i).count("joining the next generation to leave") for i in WORKER_HOSTS)
    check(rejoined == 6, f"{what}: all six workers were fenced before their leave was answered and joined the "
                         f"next generation to leave (got {rejoined})")
    return job, None


CASES = {"leader_killed_training": case_leader_killed_training,
         "leader_killed_recovery": case_leader_killed_recovery,
         "etcd_member_killed": case_etcd_member_killed,
         "coord_host_partitioned": case_coord_host_partitioned,
         "coord_host_partitioned_at_leave": case_coord_host_partitioned_at_leave}


def run_case(bindir, case, tmp):
    """Runs one case in a fresh lab: (jobs, figures)."""
    with netlab.Lab(5) as lab:
        ref = jobs.run_job(bindir, tmp, "ref", steps=STEPS, worker_args=WORKER, lab=lab)
        etcd = control.EtcdOnHosts(lab, WORKER_HOSTS, tmp)
        job, figures = CASES[case](bindir, tmp, lab, etcd, ref)
        check(len(set(ref.digests.values())) == 1 and len(ref.digests) == 6,
              f"failure-free reference: six slots, one digest (got {ref.digests})")
        return [ref, job], figures


def main():
    return jobs.case_main("failover_test.py", CASES, lambda bindir, case, tmp: run_case(bindir, case, tmp)[0],
                          needs=[("etcd", "etcd-server"), ("etcdctl", "etcd-client")])


if __name__ == "__main__":
    sys.exit(main())
