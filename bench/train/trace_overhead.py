#!/usr/bin/env python3
"""What `ringfence run --trace` costs a training step: train_mlp under the launcher, with
and without --trace, interleaved (ABBA...), on a shared machine.

  python3 bench/train/trace_overhead.py [--ringfence build/bin/ringfence]
      [--train-mlp build/bin/train_mlp] [-n 2] [--steps 800] [--repeats 4]

Two figures per run, each with the warm-up and set-up cancelled by subtracting a run of
W steps from a run of S + W steps:
  * wall ms/step: rank 0's step time (what a user waits for), sensitive to other jobs;
  * CPU ms/step: the user+system CPU time of the launcher, the coordinator and every
    worker (their writer threads and the merge at the end included), which does not count
    time spent waiting for a core, divided by S.
Prints the median of each, and on/off ratios. Both runs train the same steps with the same
seed: the script also checks the final state digests are equal (tracing changes nothing).
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

WARM = 100


def run(a, steps, trace):
    """(wall seconds, CPU seconds, state digest) of one job of `steps` steps."""
    extra = ["--trace", trace] if trace else []
    cmd = [a.ringfence, "run", "-n", str(a.n), "--quiet", *extra, "--", a.train_mlp, "--batch", "128",
           "--epochs", "10", "--max-steps", str(steps), "--log-interval", "0"]
    t0, c0 = time.monotonic(), os.times()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    t1, c1 = time.monotonic(), os.times()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-2000:]}")
    digest = re.search(r"^== test accuracy .* state ((?:x3:)?[0-9a-f]+)$", p.stdout + p.stderr, re.M)
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    return t1 - t0, cpu, digest.group(1) if digest else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringfence", default="build/bin/ringfence")
    ap.add_argument("--train-mlp", default="build/bin/train_mlp")
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--repeats", type=int, default=4)
    a = ap.parse_args()
    res = {"off": {"wall": [], "cpu": []}, "on": {"wall": [], "cpu": []}}
    digests = set()
    with tempfile.TemporaryDirectory(prefix="rf_trace_overhead_") as tmp:
        trace = os.path.join(tmp, "trace.json")
        for r in range(a.repeats):
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                t = trace if mode == "on" else None
                wall_long, cpu_long, d = run(a, a.steps + WARM, t)
                wall_short, cpu_short, _ = run(a, WARM, t)
                digests.add(d)
                res[mode]["wall"].append(1000.0 * (wall_long - wall_short) / a.steps)
                res[mode]["cpu"].append(1000.0 * (cpu_long - cpu_short) / a.steps)
    for mode in ("off", "on"):
        for k in ("wall", "cpu"):
            v = res[mode][k]
            runs = " ".join(f"{x:.3f}" for x in v)
            print(f"trace {mode:3s} {k:4s} ms/step median {statistics.median(v):.3f}  runs {runs}")
    for k in ("wall", "cpu"):
        print(f"on/off {k}: {statistics.median(res['on'][k]) / statistics.median(res['off'][k]):.3f}")
    print("final state digests equal:", len(digests) == 1, sorted(d or "?" for d in digests))
    print("load average", " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
