#!/usr/bin/env python3
"""A/B of two train_bench builds by CPU time, interleaved, for a shared machine.

  python3 bench/train/ab_cpu.py OLD_TRAIN_BENCH NEW_TRAIN_BENCH [--model cnn] [--batch 64]
      [--repeats 5]

Each measurement is the child's user+system CPU time of a run with S + W steps minus one
with W steps, divided by S: set-up and warm-up cancel, and time the process spent waiting
for a core (other jobs' compiles) is not counted, unlike wall time. The two binaries
alternate (ABBA...). Prints the median and min CPU ms/step of each and old/new ratios.
Resolution is the kernel's CPU-time tick (10 ms per run, ~0.1 ms/step at S = 100).
"""
import argparse
import os
import statistics
import subprocess


def cpu_seconds(exe, model, batch, steps):
    t0 = os.times()
    subprocess.run([exe, "--model", model, "--batch", str(batch), "--steps", str(steps)], check=True,
                   capture_output=True)
    t1 = os.times()
    return (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--model", default="cnn", choices=["mlp", "cnn"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    steps, warm = (100, 10) if a.model == "cnn" else (400, 40)
    res = {a.old: [], a.new: []}
    for r in range(a.repeats):
        for exe in (a.old, a.new) if r % 2 == 0 else (a.new, a.old):
            per = cpu_seconds(exe, a.model, a.batch, steps + warm) - cpu_seconds(exe, a.model, a.batch, warm)
            res[exe].append(1000.0 * per / steps)
    for exe in (a.old, a.new):
        v = res[exe]
        print(f"{exe}: cpu ms/step median {statistics.median(v):.2f} min {min(v):.2f}  "
              f"runs {' '.join(f'{x:.2f}' for x in v)}")
    print(f"old/new: median {statistics.median(res[a.old]) / statistics.median(res[a.new]):.3f}  "
          f"min {min(res[a.old]) / min(res[a.new]):.3f}")
    print("load average", " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
