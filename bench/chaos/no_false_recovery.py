#!/usr/bin/env python3
"""no_false_recovery — a slow rank, a CPU hog and checkpoints are not failures.

    no_false_recovery.py [--build build] [--minutes 10] [--models mlp,cnn] [--world 4]
                         [--slow-rank 1] [--hogs 1] [--ckpt-every N] [--deadline 300] [--json OUT]

Trains the reference models (bench/recovery's worker, synthetic data) at W ranks under
`ringfence run` at DEFAULT settings, MLP then CNN, for --minutes of wall time in all (an
equal share each), as back-to-back jobs of a fixed number of steps (so every fault spec of
a job fires and the job ends DONE). In every job one rank is slow (--slow-rank, the same
rank throughout):
  * factor 5 for many steps: `slow:rank=R:step=50:factor=5:steps=N` (half the job), and
  * factor 10 for single steps from time to time after that, every 50 steps;
each slowed step is delayed by (factor - 1) x that rank's own median step time
(ddp/fault_injector.h). Meanwhile --hogs busy-loop processes compete for the cores (killed
by PID at the end), and with --ckpt-every rank 0 writes checkpoints during the run.

It counts what the coordinator's event log (--event-log) says happened: `revoke` (a
recovery began), `evict` and `fail`. None of them may appear: it prints `false
recoveries: N` (N = revokes) with the steps trained, and exits 1 if N > 0, if any evict or
fail was logged, or if a job did not end DONE before its deadline. Each job's line also
says how slow the slow rank really was (its median step interval in the factor-5 range and
at the factor-10 steps, against its steps before the range), so a slow fault that did not
bite cannot pass for one that did.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from chaoslib import Job, die_with_parent, poll_until, stop_on_sigterm, tail

JOB_STEPS = {"mlp": 600, "cnn": 300}
RANGE_START = 50  # factor 5 from here for half the job; factor 10 single steps after it


def slow_specs(rank, steps):
    half = steps // 2
    singles = list(range(RANGE_START + half + 50, steps - 10, 50))
    return ([f"slow:rank={rank}:step={RANGE_START}:factor=5:steps={half}"] +
            [f"slow:rank={rank}:step={s}:factor=10" for s in singles]), half, singles


# A busy loop. It dies with this script (die_with_parent), and also ends by itself once its
# parent changes: no hog is left on the shared cores, however the run ends.
HOG = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1000000):\n        pass\n"


def start_hogs(n):
    return [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True, preexec_fn=die_with_parent)
            for _ in range(n)]


def stop_hogs(hogs):
    for h in hogs:
        if h.poll() is None:
            h.kill()
        h.wait()  # reaped: no hog outlives the run


def slowdown(job, slot, half, singles):
    """(factor-5 range, factor-10 steps) as multiples of the rank's median step interval before
    the range (its audit log's apply times), or None where not measurable."""
    lines = job.audits().get(f"audit-slot{slot}-inc0.jsonl", [])
    at = {x["s"]: x["ts_us"] for x in lines if x["event"] == "apply"}
    dt = {s: at[s] - at[s - 1] for s in at if s - 1 in at}
    base = [dt[s] for s in range(10, RANGE_START) if s in dt]
    rng = [dt[s] for s in range(RANGE_START + 1, RANGE_START + half) if s in dt]
    ten = [dt[s] for s in singles if s in dt]
    if not base:
        return None, None, None
    b = statistics.median(base)
    return (round(b / 1000, 2), round(statistics.median(rng) / b, 2) if rng else None,
            round(statistics.median(ten) / b, 2) if ten else None)


def run_job(args, model, index):
    steps = JOB_STEPS[model]
    work = tempfile.mkdtemp(prefix=f"nofalse-{model}-{index}-")
    specs, half, singles = slow_specs(args.slow_rank, steps)
    ck = os.path.join(work, "ckpt")
    flags = ["--ckpt-dir", ck, "--ckpt-every", str(args.ckpt_every)] if args.ckpt_every else []
    job = Job(args.build, work, args.world, model, steps, specs, flags, deadline_s=args.deadline).start()
    seen = set()

    def ckpts():  # the checkpoints seen on disk while the job runs (rank 0 keeps the last 3)
        if os.path.isdir(ck):
            seen.update(n for n in os.listdir(ck) if n.startswith("ckpt-") and n.endswith(".safetensors"))
        return False
    try:
        if args.ckpt_every:
            poll_until(ckpts, job.end, job.ended, every_s=0.2)
        job.wait()
        ckpts()
    finally:
        job.stop()
    ev = job.events()
    count = {k: sum(e.get("event") == k for e in ev) for k in ("revoke", "evict", "fail")}
    summ = job.summary() or {}
    finals = job.finals()
    base_ms, x5, x10 = slowdown(job, args.slow_rank, half, singles)
    fired = {x["spec"] for lines in job.audits().values() for x in lines if x["event"] == "inject"}
    row = {"model": model, "job": index, "steps": steps, "specs": specs, "fired": sorted(fired),
           "exit_status": job.rc, "timed_out": job.timed_out, "phase": summ.get("phase"),
           "wall_s": round(job.wall_s, 1), "steps_trained": max([s + 1 for s, _ in finals.values()], default=0),
           "recoveries": len(summ.get("recoveries", [])), **count, "checkpoints_seen": len(seen),
           "step_ms_before": base_ms, "slowdown_factor5": x5, "slowdown_factor10": x10,
           "events": [e for e in ev if e.get("event") in count], "left_running": job.left_running}
    row["ok"] = (job.rc == 0 and not job.timed_out and summ.get("phase") == "DONE" and not job.left_running
                 and len(fired) == len(specs))
    if not row["ok"] or any(count.values()):
        row["output_tail"] = tail(job.output())
        row["files"] = work
    else:
        shutil.rmtree(work, ignore_errors=True)
    return row


def main():
    ap = argparse.ArgumentParser(description="no false recovery with a slow rank and a CPU hog (bench/chaos)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--minutes", type=float, default=10.0, help="wall time in all (an equal share per model)")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--hogs", type=int, default=1, help="busy-loop processes competing for the cores")
    ap.add_argument("--ckpt-every", type=int, default=0, help="rank 0 checkpoints every N steps (0: none)")
    ap.add_argument("--deadline", type=float, default=300.0, help="seconds per job before it is killed and fails")
    ap.add_argument("--json")
    args = ap.parse_args()
    stop_on_sigterm()
    models = args.models.split(",")
    if any(m not in JOB_STEPS for m in models) or not 0 <= args.slow_rank < args.world or args.minutes <= 0:
        ap.error("--models takes mlp and/or cnn, --slow-rank must be a rank below --world, --minutes > 0")
    print(f"# no_false_recovery: {args.minutes:g} min, models {args.models}, W {args.world}, slow rank "
          f"{args.slow_rank} (factor 5 for half of each job, factor 10 single steps after), {args.hogs} CPU hog(s), "
          f"checkpoints {'every %d steps' % args.ckpt_every if args.ckpt_every else 'off'}, default timeouts",
          flush=True)
    print(f"{'model':5} {'job':>3} {'steps':>5} {'wall s':>6} {'result':6} {'revoke':>6} {'evict':>5} {'fail':>4} "
          f"{'ckpts':>5} {'step ms':>7} {'x5 got':>6} {'x10 got':>7}", flush=True)
    rows = []
    hogs = start_hogs(args.hogs)
    try:
        for m in models:
            share_end = time.monotonic() + args.minutes * 60 / len(models)
            index = 0
            while index == 0 or time.monotonic() < share_end:
                r = run_job(args, m, index)
                rows.append(r)
                index += 1
                fmt = lambda v, f: "-" if v is None else f % v  # noqa: E731
                print(f"{m:5} {r['job']:>3} {r['steps_trained']:>5} {r['wall_s']:>6.1f} "
                      f"{'DONE' if r['ok'] else 'FAILED':6} {r['revoke']:>6} {r['evict']:>5} {r['fail']:>4} "
                      f"{r['checkpoints_seen']:>5} {fmt(r['step_ms_before'], '%.2f'):>7} "
                      f"{fmt(r['slowdown_factor5'], '%.1f'):>6} {fmt(r['slowdown_factor10'], '%.1f'):>7}", flush=True)
                for e in r["events"]:
                    print(f"      {e.get('event')} {e.get('cause', '')} g {e.get('g')} s {e.get('s')} "
                          f"{e.get('detail', '')}", flush=True)
                if not r["ok"]:
                    print(f"      job failed (exit {r['exit_status']}, phase {r['phase']}, fired {len(r['fired'])} "
                          f"of {len(r['specs'])} specs); files in {r['files']}\n{r['output_tail']}", flush=True)
    finally:
        stop_hogs(hogs)
    false = sum(r["revoke"] for r in rows)
    other = sum(r["evict"] + r["fail"] for r in rows)
    failed = sum(not r["ok"] for r in rows)
    trained = sum(r["steps_trained"] for r in rows)
    print(f"jobs {len(rows)} ({failed} failed), steps trained {trained}, evict/fail events {other}")
    print(f"false recoveries: {false}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"minutes": args.minutes, "models": models, "world": args.world, "slow_rank": args.slow_rank,
                       "hogs": args.hogs, "ckpt_every": args.ckpt_every, "jobs": rows, "false_recoveries": false,
                       "evict_fail_events": other, "failed_jobs": failed, "steps_trained": trained}, f, indent=1)
    return 1 if false or other or failed else 0


if __name__ == "__main__":
    sys.exit(main())
