"""Faults across three test hosts x two workers (label multihost), each case against the
failure-free run of the same job, at default settings (lease 1 s, join window 2 s, the
learned stall bound):

  host_lost_spares   host 2's launcher and workers are killed; launchers 0 and 1 hold a
                     spare slot each, which replace them: DONE at W = 6, bitwise equal.
  host_lost_shrink   no spares (min world 4): the job shrinks to W = 4, goes on, and grows
                     back to 6 when host 2's launcher returns; every step applied exactly
                     once with one digest per step, and the final loss (the mean of the
                     last 50 steps) within 1 %.
  partition          host 2's link goes down: its workers self-fence within about one lease
                     (D4) and apply no step past the shrink's T; the others go on at W = 4;
                     after the heal the fenced workers rejoin as new members (incarnation 1).
  oneway             host 1's packets to host 2 are dropped (iptables, one direction) until
                     the first recovery begins: DONE, exactly once, bitwise equal.
  slow_link          host 2's link is throttled to 100 Mbit/s (tbf) for the last steps:
                     slower, but no failure is declared (generation 1 throughout), bitwise
                     equal.
  lossy_host         host 2 drops 20 % of what it sends (iptables statistic) from its
                     launchers' start to the end: DONE at W = 6, exactly once, bitwise equal,
                     and host 2's workers either stay members (no recovery) or one of them
                     is evicted once; never a second eviction, a restart loop or a STOP.

  faults_test.py BUILD_BIN_DIR CASE     exit 0 passed, 1 failed, 77 skipped (no namespaces)
"""
import glob
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import jobs  # noqa: E402
from rf_testlib import check  # noqa: E402

STEPS = 200


def job_done(job, what, world=6, steps=STEPS):
    jobs.check_done(job, what, steps, world)


same_digest = jobs.same_digest


def at_step(step):
    def wait(lab, job, procs):
        jobs.wait_for(lambda: jobs.step_applied(job, step), f"{job.name}: step {step} applied", 60)
    return wait


events = jobs.events


def runs_at_world(job, world):
    """Whether the coordinator's event log shows a generation RUNNING at W = world: exact,
    where the launcher's live line comes about once a second and may skip a short phase."""
    return any(e["event"] == "running" and e.get("detail") == f"world {world}" for e in events(job))


def revokes(job):
    """How many generations the coordinator revoked (a recovery begins with each)."""
    return sum(e["event"] == "revoke" for e in events(job))


def applied_after(job, at_us):
    """The steps some worker applied after the wall-clock time at_us (the audit's ts_us)."""
    return sorted({r["s"] for rs in job.audits().values() for r in rs if r["event"] == "apply" and r["ts_us"] > at_us})


def case_host_lost_spares(bindir, tmp):
    spares = {0: ["--spares", "1"], 1: ["--spares", "1"]}
    ref = jobs.run_job(bindir, tmp, "ref", steps=STEPS, launcher_args=spares)

    def kill_host(lab, job, procs):
        at_step(50)(lab, job, procs)
        lab.kill(procs[2])  # the launcher's process group: it and its workers (PDEATHSIG)
    job = jobs.run_job(bindir, tmp, "spares", steps=STEPS, launcher_args=spares, during=kill_host)
    check(job.codes[2] == -9, f"host 2's launcher was killed (got {job.codes[2]})")
    job.codes = job.codes[:2]
    job.logs = job.logs[:2]
    job_done(job, "host lost, spares")
    same_digest(job, ref, "host lost, spares")
    jobs.check_cost(job, "host lost, spares", restarts=0, faulty=(4, 5))  # the spares took host 2's slots
    return [ref, job]


def final_loss(job, steps, last=50):
    loss = {r["s"]: r["loss"] for rs in job.audits().values() for r in rs if r["event"] == "apply"}
    steps = [s for s in range(steps - last, steps) if s in loss]
    return sum(loss[s] for s in steps) / len(steps) if len(steps) == last else None


def case_host_lost_shrink(bindir, tmp):
    # The returning host's launcher starts its workers, they load the data and wait out the
    # join window (2 s) before the grow: about 3-4 s on a loaded machine, while 150 steps at
    # W = 4 took as little as 2 s. The job must outlast the return or it ends at W = 4 before
    # the grow: as in the partition case, twice as many steps.
    steps = 2 * STEPS
    ref = jobs.run_job(bindir, tmp, "ref", steps=steps)

    def lose_and_return(lab, job, procs):
        at_step(50)(lab, job, procs)
        lab.kill(procs[2])
        procs[2].wait()
        jobs.wait_for(lambda: runs_at_world(job, 4), "shrunk to W = 4", 30)
        job.logs[2] = os.path.join(tmp, "shrink-h2-back.log")
        procs[2] = job.launch(2, job.logs[2])  # the host returns: its launcher starts again
    job = jobs.run_job(bindir, tmp, "shrink", steps=steps, coord_args=["--min-world", "4"], during=lose_and_return)
    job_done(job, "host lost, shrink and grow", steps=steps)
    check(len(set(job.digests.values())) == 1, f"shrink: one final digest on every slot (got {job.digests})")
    check("members 4/6" in job.text(0), "shrink: the job ran at W = 4 while host 2 was away")
    jobs.check_cost(job, "shrink", restarts=0, faulty=(4, 5))  # host 2's launcher came back with fresh workers
    grow = re.search(r"recovery \d+: .* \(world 6, T (\d+)\)", job.text(0))
    print(f"shrink: grew back to W = 6 after step {grow.group(1) if grow else '?'} of {steps}")
    # The final loss as the mean global loss of the last 50 steps: one batch's loss swings by
    # several percent from step to step, and the two runs' float sums differ in order after
    # the shrink, so their last batches' losses differ by more than their level does.
    a, b = final_loss(ref, steps), final_loss(job, steps)
    print(f"shrink: final loss (mean of the last 50 steps) {b} against the failure-free {a}; the last step's alone "
          f"{job.final_loss} against {ref.final_loss}")
    check(a and b and abs(b - a) <= 0.01 * a, f"shrink: final loss (mean of the last 50 steps) {b} within 1 % of "
          f"the failure-free {a}")
    return [ref, job]


def flight_records(flight_dir):
    out = []
    for path in glob.glob(os.path.join(flight_dir, "*.jsonl")):
        for line in open(path):
            if line.startswith("{"):
                out.append((os.path.basename(path), json.loads(line)))
    return out


def case_partition(bindir, tmp):
    flight = os.path.join(tmp, "flight")
    os.makedirs(flight)
    marks = {}

    def cut_and_heal(lab, job, procs):
        at_step(50)(lab, job, procs)
        marks["down_us"] = time.time() * 1e6
        lab.link_down(2)
        jobs.wait_for(lambda: runs_at_world(job, 4), "the others go on at W = 4", 30)
        lab.link_up(2)
    # The fenced workers come back as new processes (their launcher kills and restarts them):
    # the survivors' remaining steps must outlast that, or the job ends at W = 4 before they
    # rejoin. 150 steps at W = 4 took as little as ~2.5 s here, a restart up to ~3 s on a
    # loaded machine: the partition case runs twice as many steps.
    steps = 2 * STEPS
    job = jobs.run_job(bindir, tmp, "partition", steps=steps, coord_args=["--min-world", "4"],
                       worker_args=["--flight-dir", flight], during=cut_and_heal)
    job_done(job, "partition", steps=steps)
    check(len(set(job.digests.values())) == 1, f"partition: one final digest on every slot (got {job.digests})")
    jobs.check_cost(job, "partition", restarts=2, faulty=(4, 5))  # the two fenced workers, replaced by their launcher
    # D4: the cut-off workers' collective failed as self-fenced, within about one lease.
    fenced = [(f, r) for f, r in flight_records(flight) if "self-fenced" in r.get("cause", "")]
    check(fenced, "partition: a cut-off worker's flight record shows it self-fenced (D4)")
    for f, r in fenced:
        late_ms = (r["end_us"] - marks.get("down_us", 0)) / 1000
        check(late_ms <= 1500, f"partition: {f} self-fenced {late_ms:.0f} ms after the cut (one lease: 1000 ms)")
    # Never a step of a revoked generation: the fenced incarnations applied nothing past T.
    t = re.search(r"recovery 1: .* -> generation \d+ \(world 4, T (\d+)\)", job.text(0))
    check(t is not None, "partition: the launcher's summary names the shrink's T")
    if t:
        audits = job.audits()
        for slot in (4, 5):
            applied = [r["s"] for r in audits.get(f"slot{slot}-inc0", []) if r["event"] == "apply"]
            check(applied and max(applied) <= int(t.group(1)),
                  f"partition: slot {slot} incarnation 0 applied nothing past T = {t.group(1)} (last {max(applied or [-1])})")
            check(f"slot{slot}-inc1" in audits, f"partition: slot {slot} rejoined as a new member (incarnation 1)")
    return [job]


def case_oneway(bindir, tmp):
    ref = jobs.run_job(bindir, tmp, "ref", steps=STEPS)

    def oneway(lab, job, procs):
        at_step(50)(lab, job, procs)
        before = revokes(job)
        lab.partition(1, 2)
        jobs.wait_for(lambda: revokes(job) > before, "a recovery begins", 60)
        lab.heal(1, 2)
    job = jobs.run_job(bindir, tmp, "oneway", steps=STEPS, during=oneway)
    job_done(job, "one-way partition")
    same_digest(job, ref, "one-way partition")
    # One end of the cut link goes: a worker of host 1 or of host 2, restarted by its launcher.
    jobs.check_cost(job, "one-way partition", restarts=(0, 2), faulty=(2, 3, 4, 5))
    return [ref, job]


def case_slow_link(bindir, tmp):
    ref = jobs.run_job(bindir, tmp, "ref", steps=STEPS)

    marks = {}

    def throttle(lab, job, procs):
        at_step(140)(lab, job, procs)
        marks["shaped_us"] = time.time() * 1e6
        lab.shape(2, 100_000)
    job = jobs.run_job(bindir, tmp, "slow", steps=STEPS, during=throttle)
    job_done(job, "slow link")
    after = applied_after(job, marks.get("shaped_us", float("inf")))
    check(after, "slow link: steps were applied over the throttled link (it was shaped before the job's last step)")
    print(f"slow link: {len(after)} step(s) applied over the throttled link")
    for i in range(3):
        check(re.search(r"job DONE \(exit 0\): generation 1, 0 restart\(s\), 0 recovery", job.text(i)),
              f"slow link: host {i}'s launcher ends in generation 1 with no restart and no recovery")
    same_digest(job, ref, "slow link")
    jobs.check_cost(job, "slow link", restarts=0)
    return [ref, job]


def case_lossy_host(bindir, tmp):
    ref = jobs.run_job(bindir, tmp, "ref", steps=STEPS)

    def lossy(lab, job, procs):
        lab.loss(2, 20)  # from before the workers join: admission, forming, training, leaving

    job = jobs.run_job(bindir, tmp, "lossy", steps=STEPS, during=lossy, deadline_s=90)
    job_done(job, "20 % loss on host 2")
    same_digest(job, ref, "20 % loss on host 2")
    # What happened, from the coordinator's event log: every worker that failed or was
    # evicted (one (slot, incarnation) may have several lines: evicted, then its exit).
    gone = sorted({(e["worker"]["slot"], e["worker"]["incarnation"]) for e in events(job)
                   if e["event"] in ("fail", "evict") and e.get("worker")})
    causes = sorted({e["cause"] for e in events(job) if e["event"] in ("fail", "evict")})
    done = re.search(r"job DONE \(exit 0\): generation (\d+), (\d+) restart\(s\), (\d+) recovery", job.text(0))
    recoveries = int(done.group(3)) if done else -1
    if not gone and recoveries == 0:
        print("lossy_host: host 2 stayed a member: generation 1 throughout, no recovery")
    elif len(gone) == 1 and gone[0][0] in (4, 5) and recoveries == 1:
        print(f"lossy_host: slot {gone[0][0]} was evicted once ({', '.join(causes)}), one recovery, then DONE")
    check((not gone and recoveries == 0) or (len(gone) == 1 and gone[0][0] in (4, 5) and recoveries == 1),
          f"lossy_host: host 2 stays a member or one of its workers is evicted once (failed or evicted: {gone}, "
          f"causes {causes}, recoveries {recoveries})")
    jobs.check_cost(job, "20 % loss on host 2", restarts=(0, 1), faulty=(4, 5))
    return [ref, job]


CASES = {"host_lost_spares": case_host_lost_spares, "host_lost_shrink": case_host_lost_shrink,
         "partition": case_partition, "oneway": case_oneway, "slow_link": case_slow_link,
         "lossy_host": case_lossy_host}


def main():
    return jobs.case_main("faults_test.py", CASES, lambda bindir, case, tmp: CASES[case](bindir, tmp))


if __name__ == "__main__":
    sys.exit(main())
