#!/usr/bin/env python3
"""recovery_bench — how long ringfence takes from a failure to the first completed step of
the new generation, by phase, for the reference MLP and CNN (W ranks, one thread each).

    recovery_bench.py [--build build] [--world 2] [--steps 120] [--fail-step 60] [--trials 3]
                      [--models mlp,cnn] [--faults kill,stop] [--json OUT]

For every (model, fault, trial) it runs `ringfence run -n W --inject FAULT` with
bench/recovery's worker and reads
  * the fault's moment: the worker's audit log line written just before it fires;
  * the launcher's --summary: detect, agree, connect, transfer, verify (ms) and T;
  * the first completed step of the new generation: the earliest `apply` line of that
    generation in any worker's audit log;
  * steps redone: the failed step minus T (the step in flight is recomputed once).
  kill = SIGKILL of rank 1 in the middle of its all-reduce (after one chunk);
  stop = SIGSTOP of rank 1 before its forward (detected when its lease expires, D2).
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

FAULTS = {
    "kill": "kill:rank=1:step={s}:phase=allreduce:after_chunks=1",
    "stop": "stop:rank=1:step={s}:phase=forward",
}


def one_run(args, model, fault):
    work = tempfile.mkdtemp(prefix="recovery_bench_")
    aud = os.path.join(work, "aud")
    os.makedirs(aud)
    summary = os.path.join(work, "summary.json")
    spec = FAULTS[fault].format(s=args.fail_step)
    cmd = [os.path.join(args.build, "bin", "ringfence"), "run", "-n", str(args.world), "--quiet", "--summary", summary,
           "--inject", spec, "--heartbeat", args.heartbeat, "--lease", args.lease, "--",
           os.path.join(args.build, "bin", "recovery_worker"), "--model", model, "--steps", str(args.steps),
           "--audit-dir", aud, "--batch", str(args.batch)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if p.returncode != 0:
        print(p.stdout[-3000:], file=sys.stderr)
        raise SystemExit(f"{model}/{fault}: ringfence run failed (exit {p.returncode}); files in {work}")
    with open(summary) as f:
        summ = json.load(f)
    lines = []
    for fn in glob.glob(os.path.join(aud, "audit-*.jsonl")):
        with open(fn) as f:
            lines += [json.loads(x) for x in f if x.strip()]
    inject = [x for x in lines if x["event"] == "inject"]
    rec = summ["recoveries"][0]
    g = rec["generation"]
    first = min(x["ts_us"] for x in lines if x["event"] == "apply" and x["g"] >= g)
    t0 = inject[0]["ts_us"]
    # Step time before the failure (median interval between one worker's applies).
    w0 = sorted(x["ts_us"] for x in lines if x["event"] == "apply" and x["slot"] == 0 and x["g"] < g)
    step_ms = statistics.median([(b - a) / 1000 for a, b in zip(w0, w0[1:])]) if len(w0) > 2 else float("nan")
    shutil.rmtree(work, ignore_errors=True)
    ph = rec["phases"]
    return {"model": model, "fault": fault, "spec": spec, "to_first_step_ms": (first - t0) / 1000,
            "detect": ph["detect"], "agree": ph["agree"], "connect": ph["connect"], "transfer": ph["transfer"],
            "verify": ph["verify"], "coordinator_total_ms": rec["total_ms"], "T": rec["target_step"],
            "steps_redone": args.fail_step - rec["target_step"], "step_ms": step_ms, "cause": rec["cause"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--fail-step", type=int, default=60)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--faults", default="kill,stop")
    ap.add_argument("--heartbeat", default="100ms")
    ap.add_argument("--lease", default="1s")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    print(f"# recovery_bench: W={args.world}, batch {args.batch}, fault at step {args.fail_step}, "
          f"heartbeat {args.heartbeat}, lease {args.lease}; times in ms")
    print(f"{'model':5} {'fault':5} {'trial':>5} {'to 1st step':>11} {'detect':>8} {'agree':>8} {'connect':>8} "
          f"{'transfer':>8} {'verify':>8} {'redone':>6} {'step':>6}")
    for model in args.models.split(","):
        for fault in args.faults.split(","):
            for t in range(args.trials):
                r = one_run(args, model, fault)
                rows.append(r)
                print(f"{model:5} {fault:5} {t:5d} {r['to_first_step_ms']:11.1f} {r['detect']:8.1f} {r['agree']:8.1f} "
                      f"{r['connect']:8.1f} {r['transfer']:8.2f} {r['verify']:8.2f} {r['steps_redone']:6d} "
                      f"{r['step_ms']:6.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
