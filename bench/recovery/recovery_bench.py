#!/usr/bin/env python3
"""recovery_bench — how long ringfence takes from a failure to the first completed step of
the new generation, by phase, for the reference MLP and CNN (W ranks, one thread each).

    recovery_bench.py [--build build] [--world 2] [--steps 120] [--fail-step 60] [--trials 3]
                      [--models mlp,cnn] [--faults kill,stop,restart,wholejob] [--spares N]
                      [--ckpt-every 100] [--json OUT] [--keep DIR]

For every model, trial and fault (in that order: the faults alternate) it runs `ringfence run -n W --inject FAULT` with
bench/recovery's worker and reads
  * the fault's moment: the worker's audit log line written just before it fires;
  * the launcher's --summary: detect, agree, connect, transfer, verify (ms) and T;
  * the first completed step of the new generation: the earliest `apply` line of that
    generation in any worker's audit log;
  * steps redone: the failed step minus T (the step in flight is recomputed once).
  kill = SIGKILL of rank 1 in the middle of its all-reduce (after one chunk);
  stop = SIGSTOP of rank 1 before its forward (detected when its lease expires, D2);
  hang = rank 1's training thread hangs before it finishes its all-reduce while its process
    and heartbeat thread live on ("NCCL timeout"): detected when its heartbeats show it
    computing past its stall bound (D3, cause hung), at default settings.
  restart = the baseline users have today, in ringfence itself: rank 0 freezes before
    the failed step, the launcher and every worker are SIGKILLed, and the same job is
    started again with --resume from its last disk checkpoint (every --ckpt-every steps):
    time from the kill to the first completed step, and the steps redone.
  wholejob = the same freeze and --ckpt-every, but only the workers are SIGKILLed (all
    SIGSTOPped first), as in tests/ddp/fault_test.py whole_job_restart: the living launcher
    restarts them and they continue from this job's newest checkpoint without --resume
    (docs/ddp.md "Whole-job failure"). The same times from the kill, and the launcher's
    --summary: its one recovery, whose whole_job_restart must be true (the run fails
    otherwise), total_ms and phases. With both faults each model gets a line
    wholejob/restart (medians of its trials, same run). Neither uses --spares.
  --spares N starts N standby workers with the job (`ringfence run --spares N`): a spare
  has built its model and faulted its buffers in before any failure, so it takes the dead
  rank's place without a start-up inside the recovery.

Where "agree" goes (kill/stop rows; the launcher's --summary and the coordinator's
--event-log, wall clock): `gone` = from the revoke to the launcher's reap of the failed
incarnation (for a SIGSTOP: the launcher's status poll, its SIGKILL and the kernel's
teardown of the stopped process; for a SIGKILL the reap comes first and `gone` is ~0 —
that teardown ran before anyone could see the failure, outside every phase:
`inject->reap`); `spawn` = from the revoke to the replacement's spawn; `startup` = from
the spawn to its join (exec, model, optimizer, buckets: the replacement's start-up);
`join->plan` the rest of "agree" (agree = spawn + startup + join->plan).
--keep DIR keeps each run's files (audit logs, summary, event log) in DIR/<model>-<fault>-<trial>.
"""
import argparse
import time
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ddp"))
from auditlog import read_audits  # noqa: E402  (shared with tests/ddp/fault_test.py and bench/chaos)
from jobprocs import kill_job, kill_workers, procs_mentioning  # noqa: E402  (shared with tests/ddp/fault_test.py)

FAULTS = {
    "kill": "kill:rank=1:step={s}:phase=allreduce:after_chunks=1",
    "stop": "stop:rank=1:step={s}:phase=forward",
    "hang": "hang:rank=1:step={s}:phase=allreduce",
}


def startup_split(summ, events, rec, t_inject_us):
    """Where the failed slot's restart spent "agree": see the module doc (ms; NaN where a
    spare took the place and no restart ran inside the recovery)."""
    nan = float("nan")
    slot = rec["worker"]["slot"] if isinstance(rec.get("worker"), dict) else None
    w = next((x for x in summ.get("workers", []) if x["slot"] == slot), None)
    revoke = next((e["ts_us"] for e in events if e["event"] == "revoke" and e["ts_us"] >= t_inject_us), None)
    plan = next((e["ts_us"] for e in events if e["event"] == "plan" and revoke and e["ts_us"] >= revoke), None)
    out = {"gone_ms": nan, "inject_reap_ms": nan, "spawn_ms": nan, "startup_ms": nan, "join_plan_ms": nan}
    if w is None or revoke is None:
        return out
    inc = rec["worker"]["incarnation"]
    reap = next((e["wall_us"] for e in w["exits"] if e["incarnation"] == inc), None)
    spawn = next((e for e in w["spawns"] if e["incarnation"] == inc + 1 and e["reason"] == "restart"), None)
    if reap is not None:
        out["gone_ms"] = (reap - revoke) / 1000
        out["inject_reap_ms"] = (reap - t_inject_us) / 1000
    if spawn is None:
        return out
    join = next((e["ts_us"] for e in events if e["event"] == "join" and e.get("worker", {}).get("slot") == slot
                 and e.get("worker", {}).get("incarnation") == inc + 1), None)
    out["spawn_ms"] = (spawn["wall_us"] - revoke) / 1000
    if join is not None:
        out["startup_ms"] = (join - spawn["wall_us"]) / 1000
        if plan is not None and plan >= join:
            out["join_plan_ms"] = (plan - join) / 1000
    return out


def one_run(args, model, fault, trial=0):
    work = tempfile.mkdtemp(prefix="recovery_bench_")
    aud = os.path.join(work, "aud")
    os.makedirs(aud)
    summary = os.path.join(work, "summary.json")
    events_path = os.path.join(work, "events.jsonl")
    spec = FAULTS[fault].format(s=args.fail_step)
    cmd = [os.path.join(args.build, "bin", "ringfence"), "run", "-n", str(args.world), "--quiet", "--summary", summary,
           "--event-log", events_path,
           "--inject", spec, "--heartbeat", args.heartbeat, "--lease", args.lease] + \
          (["--spares", str(args.spares)] if args.spares else []) + ["--",
           os.path.join(args.build, "bin", "recovery_worker"), "--model", model, "--steps", str(args.steps),
           "--audit-dir", aud, "--batch", str(args.batch)] + (["--data-dir", args.data_dir] if args.data_dir else [])
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode != 0:
        print(p.stdout[-3000:], file=sys.stderr)
        raise SystemExit(f"{model}/{fault}: ringfence run failed (exit {p.returncode}); files in {work}")
    with open(summary) as f:
        summ = json.load(f)
    lines = audit_lines(aud)
    inject = [x for x in lines if x["event"] == "inject"]
    rec = summ["recoveries"][0]
    g = rec["generation"]
    first = min(x["ts_us"] for x in lines if x["event"] == "apply" and x["g"] >= g)
    t0 = inject[0]["ts_us"]
    # Step time before the failure (median interval between one worker's applies).
    w0 = sorted(x["ts_us"] for x in lines if x["event"] == "apply" and x["slot"] == 0 and x["g"] < g)
    step_ms = statistics.median([(b - a) / 1000 for a, b in zip(w0, w0[1:])]) if len(w0) > 2 else float("nan")
    with open(events_path) as f:
        events = [json.loads(x) for x in f if x.strip()]
    where = startup_split(summ, events, rec, t0)
    if args.keep:
        shutil.copytree(work, os.path.join(args.keep, f"{model}-{fault}-{trial}"), dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    ph = rec["phases"]
    # The receiver's own split of "transfer" (its audit line; ddp/recovery.cpp, Recovery::transfer).
    tr = [x for x in lines if x["event"] == "transfer" and x["g"] == g]
    split = {k: tr[0].get(k, float("nan")) if tr else float("nan")
             for k in ("staging_wait_ms", "size_wait_ms", "image_ms", "restore_ms")}
    return {**split, **where, "model": model, "fault": fault, "spec": spec, "to_first_step_ms": (first - t0) / 1000,
            "detect": ph["detect"], "agree": ph["agree"], "connect": ph["connect"], "transfer": ph["transfer"],
            "verify": ph["verify"], "coordinator_total_ms": rec["total_ms"], "T": rec["target_step"],
            "steps_redone": args.fail_step - rec["target_step"], "step_ms": step_ms, "cause": rec["cause"]}


def audit_lines(aud, files="audit-*.jsonl"):
    """Every complete record of the workers' audit logs whose names match files (they may
    be read while a worker appends: whole_job_run polls them; auditlog.records)."""
    return [x for lines in read_audits(aud, files).values() for x in lines]


def whole_job_run(args, model, fault, trial=0):
    """Faults restart and wholejob (module doc): rank 0 freezes before --fail-step, then
    restart SIGKILLs every process and runs the job again with --resume; wholejob SIGKILLs
    only the workers, and the living launcher restarts them. Times run from the kill."""
    work = tempfile.mkdtemp(prefix="recovery_bench_")
    ck = ["--ckpt-dir", os.path.join(work, "ckpt"), "--ckpt-every", str(args.ckpt_every)]
    worker = [os.path.join(args.build, "bin", "recovery_worker"), "--model", model, "--steps", str(args.steps),
              "--batch", str(args.batch)] + ck + (["--data-dir", args.data_dir] if args.data_dir else [])
    summary = os.path.join(work, "summary.json")
    ringfence = [os.path.join(args.build, "bin", "ringfence"), "run", "-n", str(args.world), "--quiet",
                 "--summary", summary, "--event-log", os.path.join(work, "events.jsonl")]
    aud1, aud2 = os.path.join(work, "aud1"), os.path.join(work, "aud2")
    os.makedirs(aud1)
    os.makedirs(aud2)
    freeze = f"stop:rank=0:step={args.fail_step}:phase=forward"
    p = subprocess.Popen(ringfence + ["--inject", freeze, "--"] + worker + ["--audit-dir", aud1],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        t_end = time.monotonic() + 300
        while not any(x["event"] == "inject" for x in audit_lines(aud1)):
            # polling the audit file for a condition; a launcher that ended (its workers
            # could not start, the job failed) or no freeze by the deadline fails the run
            if p.poll() is not None:
                raise SystemExit(f"{model}/{fault}: the job ended (exit {p.returncode}) before rank 0 froze at "
                                 f"step {args.fail_step}; files in {work}:\n{p.communicate()[0][-2000:]}")
            if time.monotonic() > t_end:
                raise SystemExit(f"{model}/{fault}: rank 0 did not freeze at step {args.fail_step} within 300 s; "
                                 f"files in {work}")
            time.sleep(0.002)
    except BaseException:
        if p.poll() is None:
            kill_job(p, work)  # nothing of this job outlives the run (an error, ^C)
        raise
    if fault == "restart":
        t_kill = kill_job(p, work)
        while procs_mentioning(work) and time.monotonic() < t_end:
            time.sleep(0.002)
        p.communicate()
        q = subprocess.run(ringfence + ["--"] + worker + ["--audit-dir", aud2, "--resume"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        rc, out, lines = q.returncode, q.stdout, audit_lines(aud2)
    else:
        t_kill, killed = kill_workers(p, work)
        if killed != args.world:
            kill_job(p, work)
            raise SystemExit(f"{model}/{fault}: killed {killed} workers at the freeze, expected {args.world}; "
                             f"files in {work}")
        try:
            out, _ = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            kill_job(p, work)
            raise SystemExit(f"{model}/{fault}: the job was still running 600 s after the kill; files in {work}")
        rc, lines = p.returncode, audit_lines(aud1, "audit-*-inc[1-9]*.jsonl")  # the restarted workers'
    if rc != 0:
        raise SystemExit(f"{model}/{fault}: the job after the kill failed (exit {rc}); files in {work}:\n{out[-2000:]}")
    # the last step applied before the kill (every first incarnation's log)
    before = max(x["s"] for x in audit_lines(aud1, "audit-*-inc0.jsonl") if x["event"] == "apply")
    resumed = min((x["s"] for x in lines if x["event"] == "resume"), default=None)
    if resumed is None:
        raise SystemExit(f"{model}/{fault}: no worker restored a checkpoint after the kill at step {before} "
                         f"(--ckpt-every {args.ckpt_every}); files in {work}")
    first = min(x["ts_us"] for x in lines if x["event"] == "apply")
    # back where it was: step `before` applied again (the work lost, restart included)
    caught_up = min(x["ts_us"] for x in lines if x["event"] == "apply" and x["s"] == before)
    row = {"model": model, "fault": fault, "to_first_step_ms": (first - t_kill * 1e6) / 1000,
           "time_lost_ms": (caught_up - t_kill * 1e6) / 1000,
           "resumed_step": resumed, "steps_redone": before - resumed, "last_applied": before}
    if fault == "wholejob":  # the launcher's account: one recovery, T restored from disk
        with open(summary) as f:
            recs = json.load(f)["recoveries"]
        if len(recs) != 1 or recs[0]["whole_job_restart"] is not True or not recs[0]["finished"] \
                or recs[0]["target_step"] != resumed:
            raise SystemExit(f"{model}/{fault}: the launcher's summary is not one finished whole_job_restart "
                             f"recovery to T = {resumed} (the restored step): {recs}; files in {work}")
        nan = float("nan")
        row.update({k: nan if v is None else v for k, v in recs[0]["phases"].items()})
        row.update({"coordinator_total_ms": recs[0]["total_ms"], "rounds": recs[0]["rounds"],
                    "whole_job_restart": True, "T": recs[0]["target_step"]})
    if args.keep:
        shutil.copytree(work, os.path.join(args.keep, f"{model}-{fault}-{trial}"), dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return row


def whole_job_row(r, t):
    """A restart or wholejob row of the table: restart has no phases (two jobs, no recovery)."""
    how = (f"launcher alive, {r['rounds']} round(s), coordinator total {r['coordinator_total_ms']:.0f} ms"
           if r["fault"] == "wholejob" else "launcher too, --resume")
    cols = (f" {r['detect']:8.1f} {r['agree']:8.1f} {r['connect']:8.1f} {r['transfer']:8.2f} {r['verify']:8.2f} "
            f"{r['steps_redone']:6d}" if r["fault"] == "wholejob" else "")
    return (f"{r['model']:5} {r['fault']:8} {t:2d} {r['to_first_step_ms']:11.1f}{cols}   (workers SIGKILLed after step "
            f"{r['last_applied']} ({how}), resumed from the checkpoint of step {r['resumed_step']}: "
            f"{r['steps_redone']} steps redone, back at step {r['last_applied']} after {r['time_lost_ms']:.0f} ms)")


def whole_job_ratio(rows):
    """One model's wholejob/restart line, or None without a pair: each trial runs the two
    back to back, so the ratio is taken per trial and the median of those is printed (with
    the medians of the times themselves for scale)."""
    by = {(x["fault"], x["trial"]): x for x in rows if x["fault"] in ("wholejob", "restart")}
    trials = sorted(t for f, t in by if f == "wholejob" and ("restart", t) in by)
    if not trials:
        return None

    def med(fault, k):
        return statistics.median(by[fault, t][k] for t in trials)

    def ratio(k):
        return statistics.median(by["wholejob", t][k] / by["restart", t][k] for t in trials)
    return (f"{rows[0]['model']:5} wholejob/restart, median of {len(trials)} paired trial(s): to 1st step "
            f"{ratio('to_first_step_ms'):.2f} ({med('wholejob', 'to_first_step_ms'):.0f} vs "
            f"{med('restart', 'to_first_step_ms'):.0f} ms), back at the step killed {ratio('time_lost_ms'):.2f} "
            f"({med('wholejob', 'time_lost_ms'):.0f} vs {med('restart', 'time_lost_ms'):.0f} ms)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--fail-step", type=int, default=60)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--faults", default="kill,stop,hang,restart")
    ap.add_argument("--heartbeat", default="100ms")
    ap.add_argument("--lease", default="1s")
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--spares", type=int, default=0, help="standby workers started with the job")
    ap.add_argument("--data-dir", help="real Fashion-MNIST (default: synthetic, no load time)")
    ap.add_argument("--json")
    ap.add_argument("--keep", help="keep each run's files under this folder")
    args = ap.parse_args()
    rows = []
    print(f"# recovery_bench: W={args.world}, batch {args.batch}, fault at step {args.fail_step}, "
          f"heartbeat {args.heartbeat}, lease {args.lease}, spares {args.spares}; times in ms")
    print(f"{'model':5} {'fault':5} {'trial':>5} {'to 1st step':>11} {'detect':>8} {'agree':>8} {'connect':>8} "
          f"{'transfer':>8} {'verify':>8} {'redone':>6} {'step':>6}   receiver's transfer: staging wait, source "
          f"serialising, image, R6 restore | agree: gone, spawn, startup, join->plan (inject->reap)")
    for model in args.models.split(","):
        for t in range(args.trials):  # the faults alternate within a trial: a ratio between two is paired
            for fault in args.faults.split(","):
                if fault in ("restart", "wholejob"):
                    r = whole_job_run(args, model, fault, t)
                    r["trial"] = t
                    rows.append(r)
                    print(whole_job_row(r, t), flush=True)
                    continue
                r = one_run(args, model, fault, t)
                r["trial"] = t
                rows.append(r)
                print(f"{model:5} {fault:5} {t:5d} {r['to_first_step_ms']:11.1f} {r['detect']:8.1f} {r['agree']:8.1f} "
                      f"{r['connect']:8.1f} {r['transfer']:8.2f} {r['verify']:8.2f} {r['steps_redone']:6d} "
                      f"{r['step_ms']:6.1f}   {r['staging_wait_ms']:.0f} / {r['size_wait_ms']:.0f} / "
                      f"{r['image_ms']:.0f} / {r['restore_ms']:.0f} | {r['gone_ms']:.0f}, {r['spawn_ms']:.0f}, "
                      f"{r['startup_ms']:.0f}, "
                      f"{r['join_plan_ms']:.0f} ({r['inject_reap_ms']:.0f})", flush=True)
        ratio = whole_job_ratio([r for r in rows if r["model"] == model])
        if ratio:
            print(ratio, flush=True)
        for fault in args.faults.split(","):
            times = [r["to_first_step_ms"] for r in rows if r["model"] == model and r["fault"] == fault]
            if times:
                causes = sorted({r.get("cause", "?") for r in rows if r["model"] == model and r["fault"] == fault})
                print(f"# {model} {fault}: to the first step, median {statistics.median(times):.1f} ms of "
                      f"{len(times)} trial(s) (min {min(times):.1f}, max {max(times):.1f}); cause {', '.join(causes)}",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
