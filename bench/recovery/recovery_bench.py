#!/usr/bin/env python3
"""recovery_bench — how long ringfence takes from a failure to the first completed step of
the new generation, by phase, for the reference MLP and CNN (W ranks, one thread each).

    recovery_bench.py [--build build] [--world 2] [--steps 120] [--fail-step 60] [--trials 3]
                      [--models mlp,cnn] [--faults kill,stop] [--spares N] [--json OUT]

For every (model, fault, trial) it runs `ringfence run -n W --inject FAULT` with
bench/recovery's worker and reads
  * the fault's moment: the worker's audit log line written just before it fires;
  * the launcher's --summary: detect, agree, connect, transfer, verify (ms) and T;
  * the first completed step of the new generation: the earliest `apply` line of that
    generation in any worker's audit log;
  * steps redone: the failed step minus T (the step in flight is recomputed once).
  kill = SIGKILL of rank 1 in the middle of its all-reduce (after one chunk);
  stop = SIGSTOP of rank 1 before its forward (detected when its lease expires, D2).
  restart = the baseline users have today, in ringfence itself: rank 0 freezes before
    the failed step, the launcher and every worker are SIGKILLed, and the same job is
    started again with --resume from its last disk checkpoint (every --ckpt-every steps):
    time from the kill to the first completed step, and the steps redone.
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
import glob
import time
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ddp"))
from jobprocs import kill_job, procs_mentioning  # noqa: E402  (shared with tests/ddp/fault_test.py)

FAULTS = {
    "kill": "kill:rank=1:step={s}:phase=allreduce:after_chunks=1",
    "stop": "stop:rank=1:step={s}:phase=forward",
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
    # The receiver's own split of "transfer" (its audit line; ddp/trainer.cpp step 6).
    tr = [x for x in lines if x["event"] == "transfer" and x["g"] == g]
    split = {k: tr[0].get(k, float("nan")) if tr else float("nan")
             for k in ("staging_wait_ms", "size_wait_ms", "image_ms", "restore_ms")}
    return {**split, **where, "model": model, "fault": fault, "spec": spec, "to_first_step_ms": (first - t0) / 1000,
            "detect": ph["detect"], "agree": ph["agree"], "connect": ph["connect"], "transfer": ph["transfer"],
            "verify": ph["verify"], "coordinator_total_ms": rec["total_ms"], "T": rec["target_step"],
            "steps_redone": args.fail_step - rec["target_step"], "step_ms": step_ms, "cause": rec["cause"]}


def audit_lines(aud):
    """Every complete record of the workers' audit logs. They may be read while a worker
    appends (restart_run polls them): what follows the last newline of one read is not a
    record yet. (Iterating the file's lines instead can return a record's head at one end
    of the file and, the writer having appended meanwhile, its tail as the next line.)"""
    lines = []
    for fn in glob.glob(os.path.join(aud, "audit-*.jsonl")):
        with open(fn) as f:
            text = f.read()
        lines += [json.loads(x) for x in text[:text.rfind("\n") + 1].split("\n") if x.strip()]
    return lines


def restart_run(args, model):
    work = tempfile.mkdtemp(prefix="recovery_bench_")
    ck = ["--ckpt-dir", os.path.join(work, "ckpt"), "--ckpt-every", str(args.ckpt_every)]
    worker = [os.path.join(args.build, "bin", "recovery_worker"), "--model", model, "--steps", str(args.steps),
              "--batch", str(args.batch)] + ck + (["--data-dir", args.data_dir] if args.data_dir else [])
    ringfence = [os.path.join(args.build, "bin", "ringfence"), "run", "-n", str(args.world), "--quiet"]
    aud1, aud2 = os.path.join(work, "aud1"), os.path.join(work, "aud2")
    os.makedirs(aud1)
    os.makedirs(aud2)
    freeze = f"stop:rank=0:step={args.fail_step}:phase=forward"
    p = subprocess.Popen(ringfence + ["--inject", freeze, "--"] + worker + ["--audit-dir", aud1],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t_end = time.monotonic() + 300
    while time.monotonic() < t_end and not any(x["event"] == "inject" for x in audit_lines(aud1)):
        time.sleep(0.002)  # polling the audit file for a condition
    t_kill = kill_job(p, work)
    while procs_mentioning(work) and time.monotonic() < t_end:
        time.sleep(0.002)
    before = max(x["s"] for x in audit_lines(aud1) if x["event"] == "apply")
    q = subprocess.run(ringfence + ["--"] + worker + ["--audit-dir", aud2, "--resume"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    if q.returncode != 0:
        raise SystemExit(f"{model}/restart: the resumed job failed:\n{q.stdout[-2000:]}")
    lines = audit_lines(aud2)
    resumed = min(x["s"] for x in lines if x["event"] == "resume")
    first = min(x["ts_us"] for x in lines if x["event"] == "apply")
    # back where it was: step `before` applied again (the work lost, restart included)
    caught_up = min(x["ts_us"] for x in lines if x["event"] == "apply" and x["s"] == before)
    shutil.rmtree(work, ignore_errors=True)
    return {"model": model, "fault": "restart", "to_first_step_ms": (first - t_kill * 1e6) / 1000,
            "time_lost_ms": (caught_up - t_kill * 1e6) / 1000,
            "resumed_step": resumed, "steps_redone": before - resumed, "last_applied": before}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--fail-step", type=int, default=60)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--faults", default="kill,stop,restart")
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
        for fault in args.faults.split(","):
            for t in range(args.trials):
                if fault == "restart":
                    r = restart_run(args, model)
                    rows.append(r)
                    print(f"{model:5} {fault:7} {t:5d} {r['to_first_step_ms']:11.1f}   (whole job killed after step "
                          f"{r['last_applied']}, resumed from the checkpoint of step {r['resumed_step']}: "
                          f"{r['steps_redone']} steps redone, back at step {r['last_applied']} after "
                          f"{r['time_lost_ms']:.0f} ms)", flush=True)
                    continue
                r = one_run(args, model, fault, t)
                rows.append(r)
                print(f"{model:5} {fault:5} {t:5d} {r['to_first_step_ms']:11.1f} {r['detect']:8.1f} {r['agree']:8.1f} "
                      f"{r['connect']:8.1f} {r['transfer']:8.2f} {r['verify']:8.2f} {r['steps_redone']:6d} "
                      f"{r['step_ms']:6.1f}   {r['staging_wait_ms']:.0f} / {r['size_wait_ms']:.0f} / "
                      f"{r['image_ms']:.0f} / {r['restore_ms']:.0f} | {r['gone_ms']:.0f}, {r['spawn_ms']:.0f}, "
                      f"{r['startup_ms']:.0f}, "
                      f"{r['join_plan_ms']:.0f} ({r['inject_reap_ms']:.0f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
