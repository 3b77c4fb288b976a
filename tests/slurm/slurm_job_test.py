"""ringfence under Slurm (label slurm): `sbatch` jobs on the test cluster of
tests/slurm/slurmlab.py (slurmctld, a slurmd in each of three or four namespace hosts), one
`ringfence run` launcher per node started by `srun --ntasks-per-node=1`, two workers each,
at default settings. Faults fire at an audited step, never on a clock.

  worker_killed      a worker on node 1 is SIGKILLed at step 40 (float mode, W = 6): its
                     launcher restarts it in place; one restart, only that slot failed, the
                     Slurm step runs on untouched (srun exits 0, job COMPLETED, no srun
                     error); bitwise equal to the failure-free job.
  node_lost          four nodes, --spare-nodes 1: node n2 (its slurmd and every process on
                     it) is killed at step 50; the spare node's workers take its two places:
                     DONE at W = 6, bitwise equal to the failure-free job; prints which node,
                     the recovery by phase and the digests.
  link_cut           exact mode, --min-world 4: n2's link is cut at step 50; the job shrinks
                     to W = 4 and, when the link is back, grows back to 6; bitwise equal to
                     the failure-free run (exact: any W). Slurm's SlurmdTimeout here is
                     30 s, so Slurm never sees the short cut (its default is 300 s).
  preempt_resume     exact mode: `scancel --signal=TERM` at step 60 (preemption): a final
                     checkpoint, every launcher exits 0, job COMPLETED; a new sbatch on two
                     nodes (W = 4) resumes from it and ends bitwise equal to the run that
                     never stopped.
  bad_input          refused before any step, with a clear message: a step with two tasks
                     per node (the launcher starts the workers itself), and srun -K1.
  docs_script        docs/slurm.md's sbatch script, as written (ringfence and train_mlp on
                     PATH): COMPLETED, DONE, bitwise equal to train_mlp --exact by hand.

  slurm_job_test.py BUILD_BIN_DIR CASE     exit 0 passed, 1 failed, 77 skipped
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "multihost"))
sys.path.insert(0, os.path.join(HERE, ".."))
import jobs  # noqa: E402
import slurmlab  # noqa: E402
from rf_testlib import check, failures  # noqa: E402

STEPS = 200
JOB_DEADLINE_S = 150
DIGEST = re.compile(r"== train_mlp slot (\d+) incarnation \d+: step \d+, .*state (x3:[0-9a-f]{32})")


class SlurmJob(jobs.Job):
    """One sbatch job's files: a log per node (srun --output=...-%t.log), the audit log, the
    coordinator's event log (written by node 0's launcher) and each node's summary."""

    def __init__(self, name, tmp, nodes):
        super().__init__(name, tmp)
        self.nodes = nodes
        self.logs = [os.path.join(tmp, f"{name}-{i}.log") for i in range(nodes)]
        self.coord_log = os.path.join(tmp, f"{name}-batch.out")
        self.state = None
        self.srun_exit = None

    def summary(self, node=0):
        return json.loads(jobs.read(os.path.join(self.tmp, f"{self.name}-summary-{node}.json")) or "null")

    def batch_output(self):
        return jobs.read(self.coord_log)


def batch_script(bindir, job, launcher_args="", worker_args="", steps=STEPS, srun_args=""):
    t = job.tmp
    return f"""#!/bin/bash
srun -N{job.nodes} -n{job.nodes} --ntasks-per-node=1 --kill-on-bad-exit=0 --no-kill {srun_args} \\
    --output={t}/{job.name}-%t.log \\
  {bindir}/ringfence run -n 2 --event-log {t}/{job.name}-events.jsonl --summary {t}/{job.name}-summary-%n.json \\
    {launcher_args} -- \\
  {bindir}/train_mlp --epochs 10 --max-steps {steps} --log-interval 20 --audit-log {job.audit} \\
    --metrics {t}/{job.name}-metrics.json {worker_args}
echo "srun exit $?"
"""


def run_job(sl, bindir, tmp, name, nodes=3, during=None, **script):
    """Submits the job, runs `during(sl, job)` while it runs, waits for its end; the job."""
    job = SlurmJob(name, tmp, nodes)
    jid = sl.sbatch(batch_script(bindir, job, **script), [f"-N{nodes}", "--no-kill", f"--job-name={name}",
                                                          f"--output={job.coord_log}"], env={"UCX_TLS": "self,tcp"})
    job.jid = jid
    if during:
        during(sl, job)
    job.state = sl.wait_job(jid, JOB_DEADLINE_S)
    m = re.search(r"srun exit (\d+)", job.batch_output())
    job.srun_exit = int(m.group(1)) if m else None
    job.codes = [job.srun_exit]
    for path in job.logs:
        for slot, digest in DIGEST.findall(jobs.read(path)):
            job.digests[int(slot)] = digest
    return job


def at_step(step):
    def wait(sl, job):
        jobs.wait_for(lambda: jobs.step_applied(job, step), f"{job.name}: step {step} applied", 90)
    return wait


def check_completed(job, what, nodes=None):
    """Slurm's view: the job COMPLETED, its srun exited 0 and said no error; every node's
    launcher in `nodes` (default all) said DONE (exit 0)."""
    check(job.state == "COMPLETED", f"{what}: Slurm job {job.jid} COMPLETED (got {job.state})")
    check(job.srun_exit == 0, f"{what}: srun exits 0 (got {job.srun_exit})")
    for i in range(job.nodes) if nodes is None else nodes:
        check("job DONE (exit 0)" in job.text(i), f"{what}: node {i}'s launcher says job DONE (exit 0)")
    check("srun: error" not in job.batch_output() or nodes is not None,
          f"{what}: srun reports no error: {[ln for ln in job.batch_output().splitlines() if 'srun' in ln][:3]}")


def exact_reference(bindir, tmp, args=("--epochs", "10", "--max-steps", str(STEPS))):
    """train_mlp --exact by hand, one rank: the digest every W ends on (docs/exact.md)."""
    r = subprocess.run([f"{bindir}/train_mlp", "--exact", "--log-interval", "100", *args], capture_output=True,
                       text=True, timeout=300, cwd=tmp)
    m = re.findall(r"state (x3:[0-9a-f]{32})", r.stdout + r.stderr)
    check(r.returncode == 0 and m, f"the reference by hand ends with a digest (exit {r.returncode})")
    return m[-1] if m else None


def same_as(job, digest, what, world):
    check(digest is not None and len(job.digests) == world and set(job.digests.values()) == {digest},
          f"{what}: every member ends bitwise equal to the reference {digest} (got {job.digests})")


def case_worker_killed(sl, bindir, tmp):
    ref = run_job(sl, bindir, tmp, "ref")
    check_completed(ref, "ref")
    job = run_job(sl, bindir, tmp, "kill", launcher_args="--inject kill:rank=3:step=40")
    check_completed(job, "kill")
    jobs.check_done(job, "kill", STEPS, world=6)
    jobs.check_cost(job, "kill", restarts=1, faulty=(3,))
    jobs.same_digest(job, ref, "kill")
    return [ref, job]


def case_node_lost(sl, bindir, tmp):
    spare = "--spare-nodes 1"
    ref = run_job(sl, bindir, tmp, "ref", nodes=4, launcher_args=spare)
    check_completed(ref, "ref")

    def lose_n2(sl, job):
        at_step(50)(sl, job)
        job.lost_at = time.time()
        sl.kill_node(2)
    job = run_job(sl, bindir, tmp, "lost", nodes=4, launcher_args=spare, during=lose_n2)
    check_completed(job, "lost", nodes=(0, 1, 3))
    ends = re.findall(r"g \d+ DONE \| members (\d+)/", job.text(0))
    check(ends and int(ends[-1]) == 6, f"lost: the job ends at W = 6 (got {ends[-1:]})")
    problems = job.exactly_once_problems()
    check(not problems, f"lost: every step applied exactly once, one digest per step: {problems[:3]}")
    check(job.applied_steps() == list(range(STEPS)), "lost: every step applied")
    jobs.same_digest(job, ref, "lost")
    gone = sorted({e["worker"]["slot"] for e in jobs.events(job) if e["event"] in ("fail", "evict") and e.get("worker")})
    check(gone == [4, 5], f"lost: only node 2's slots 4 and 5 failed (got {gone})")
    jobs.check_cost(job, "lost", restarts=0, faulty=(4, 5))  # the spare node's workers took their places
    summary = job.summary(0) or {}
    recs = summary.get("recoveries", [])
    check(recs and all(r.get("finished") for r in recs) and not any(r.get("whole_job_restart") for r in recs),
          f"lost: the recoveries finished in place (got {recs})")
    print("== node_lost: node n2 (slots 4 and 5, its slurmd and every process on it) killed at step 50")
    for r in recs:
        phases = ", ".join(f"{k} {v:.1f} ms" if v is not None else f"{k} -" for k, v in r.get("phases", {}).items())
        print(f"== node_lost: recovery to generation {r.get('generation')}: cause {r.get('cause')}, slot "
              f"{r.get('worker', {}).get('slot')}, world {r.get('world')}, T {r.get('target_step')}, "
              f"total {r.get('total_ms', 0):.1f} ms ({phases})")
    print(f"== node_lost: final digest {sorted(set(job.digests.values()))}, reference {sorted(set(ref.digests.values()))}")
    return [ref, job]


def case_link_cut(sl, bindir, tmp):
    exact = "--exact"
    want = exact_reference(bindir, tmp)

    def blip(sl, job):
        at_step(50)(sl, job)
        sl.cut_link(2)
        jobs.wait_for(lambda: runs_at(job, 4), "cut: the job runs at W = 4", 60)
        sl.heal_link(2)
        jobs.wait_for(lambda: runs_at(job, 6, after_world=4), "cut: the job grows back to W = 6", 90)
    job = run_job(sl, bindir, tmp, "cut", launcher_args="--min-world 4", worker_args=exact, during=blip)
    check_completed(job, "cut")
    ends = re.findall(r"g \d+ DONE \| members (\d+)/", job.text(0))
    check(ends and int(ends[-1]) == 6, f"cut: the job ends at W = 6 (got {ends[-1:]})")
    problems = job.exactly_once_problems()
    check(not problems, f"cut: every step applied exactly once, one digest per step: {problems[:3]}")
    jobs.check_cost(job, "cut", restarts=2, faulty=(4, 5))  # the two fenced workers, replaced by their launcher
    same_as(job, want, "cut", 6)
    return [job]


def runs_at(job, world, after_world=None):
    """Whether the event log shows a generation RUNNING at W = world (after one at
    after_world, when given)."""
    seen_before = after_world is None
    for e in jobs.events(job):
        if e["event"] != "running":
            continue
        if e.get("detail") == f"world {after_world}":
            seen_before = True
        elif seen_before and e.get("detail") == f"world {world}":
            return True
    return False


def case_preempt_resume(sl, bindir, tmp):
    want = exact_reference(bindir, tmp)
    ckpt = os.path.join(tmp, "ckpt")
    worker = f"--exact --ckpt-dir {ckpt} --ckpt-every 50 --resume"

    def preempt(sl, job):
        at_step(60)(sl, job)
        r = sl.run(["scancel", "--signal=TERM", str(job.jid)], timeout=30)
        check(r.returncode == 0, f"scancel --signal=TERM exits 0 ({r.stderr.strip()})")
    first = run_job(sl, bindir, tmp, "first", worker_args=worker, during=preempt)
    check(first.state == "COMPLETED", f"first: the preempted job COMPLETED (got {first.state})")
    check(first.srun_exit == 0, f"first: srun exits 0 after the graceful stop (got {first.srun_exit})")
    for i in range(3):
        check("job STOPPED" in first.text(i) or "stop requested" in first.text(i),
              f"first: node {i}'s launcher stopped gracefully")
    stopped_at = max(first.applied_steps() or [-1])
    check(60 <= stopped_at < STEPS - 1, f"first: stopped mid-run (last step {stopped_at})")
    saved = sorted(int(m) for m in re.findall(r"ckpt-0*(\d+)\.safetensors", " ".join(os.listdir(ckpt))))
    check(saved and saved[-1] == stopped_at, f"first: the final checkpoint is the last step {stopped_at} (got {saved})")
    jobs.check_cost(first, "first", restarts=0)  # the stop costs no worker
    second = run_job(sl, bindir, tmp, "second", nodes=2, worker_args=worker)
    jobs.check_cost(second, "second", restarts=0)
    check_completed(second, "second")
    check(f"resumed from" in second.text(0), "second: resumed from the checkpoint")
    check(min(second.applied_steps() or [0]) == stopped_at + 1,
          f"second: starts at step {stopped_at + 1} (got {min(second.applied_steps() or [-1])})")
    same_as(second, want, "second (W = 4, resumed)", 4)
    return [first, second]


def case_bad_input(sl, bindir, tmp):
    prog = f"{bindir}/ringfence run -n 2 -- {bindir}/train_mlp --max-steps 5"
    cases = [("two tasks per node", "--ntasks-per-node=2", f"srun -N3 -n6 --ntasks-per-node=2 {prog}",
              "one launcher per node"),
             ("srun -K1", "--ntasks-per-node=1", f"srun -K1 -N3 -n3 --ntasks-per-node=1 {prog}",
              "kills every task when one exits non-zero")]
    for k, (what, alloc, line, said) in enumerate(cases):
        out = os.path.join(tmp, f"bad-{k}.out")
        jid = sl.sbatch(f"#!/bin/bash\n{line}\necho \"srun exit $?\"\n", ["-N3", alloc, f"--output={out}"])
        state = sl.wait_job(jid, 60)
        text = jobs.read(out)
        check(said in text, f"{what}: the launcher says '{said}' (got {text.strip()[-400:]})")
        check(not re.search(r"RUNNING|worker: step|train_mlp slot", text), f"{what}: refused before any step")
        check(re.search(r"srun exit [1-9]", text), f"{what}: srun exits non-zero")
        check(state is not None, f"{what}: the job ended ({state})")
    return []


def case_docs_script(sl, bindir, tmp):
    text = jobs.read(os.path.join(ROOT, "docs", "slurm.md"))
    blocks = re.findall(r"```bash\n(#!/bin/bash\n.*?)```", text, re.S)
    script = next((b for b in blocks if "#SBATCH" in b), None)
    check(script is not None, "docs/slurm.md has an sbatch script")
    if script is None:
        return []
    args = re.findall(r"--exact|--epochs \d+|--max-steps \d+", script.split("train_mlp", 1)[1])
    check("--exact" in args, "docs script: trains in exact mode (its reference is a run by hand)")
    want = exact_reference(bindir, tmp, [a for x in args if x != "--exact" for a in x.split()])
    path = os.path.join(tmp, "train.sbatch")
    with open(path, "w") as f:
        f.write(script)
    out = os.path.join(tmp, "docs-script.out")
    env = {"UCX_TLS": "self,tcp", "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    jid = sl.sbatch(path, [f"--output={out}"], env=env)
    state = sl.wait_job(jid, JOB_DEADLINE_S * 2)
    log = jobs.read(out)
    check(state == "COMPLETED", f"docs script: COMPLETED (got {state}); output: {log[-600:]}")
    check(log.count("job DONE (exit 0)") == 3, f"docs script: three launchers say job DONE (exit 0)")
    got = set(re.findall(r"state (x3:[0-9a-f]{32})", log))
    check(got == {want}, f"docs script: bitwise equal to train_mlp {' '.join(args)} by hand {want} (got {got})")
    rec = [r for r in sl.completions() if r.get("JobId") == str(jid)]
    print(f"== docs script: job {jid} {state}; its jobcomp record (what `sacct -c` shows): {rec[-1:] or 'none'}")
    return []


CASES = {"worker_killed": (case_worker_killed, {}), "node_lost": (case_node_lost, {"hosts": 4}),
         "link_cut": (case_link_cut, {"slurmd_timeout": 30}), "preempt_resume": (case_preempt_resume, {}),
         "bad_input": (case_bad_input, {}), "docs_script": (case_docs_script, {})}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        sys.exit(f"usage: slurm_job_test.py BUILD_BIN_DIR {{{','.join(CASES)}}}")
    why = slurmlab.unavailable_reason()
    if why:
        print(f"SKIPPED: {why}")
        return 77
    bindir, case = os.path.abspath(sys.argv[1]), sys.argv[2]
    run, lab_args = CASES[case]
    t0 = time.monotonic()
    sl = slurmlab.SlurmLab(**{"hosts": 3, **lab_args})
    tmp = sl.tmp
    ran = []
    try:
        ran = run(sl, bindir, tmp)
    finally:
        if failures:
            sl.keep = True
            for job in ran:
                job.dump()
        sl.close()
    if failures:
        print(f"slurm_job_test.py {case}: {len(failures)} check(s) failed in {time.monotonic() - t0:.1f} s; files in {tmp}")
        return 1
    print(f"slurm_job_test.py {case}: passed in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
