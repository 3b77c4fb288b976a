#!/usr/bin/env python3
"""Step time of two builds, in one run: bench/train's train_bench and ddp_bench, interleaved.

  python3 bench/compare_builds.py BASE_BIN NEW_BIN [--rounds 6] [--models mlp,cnn]

BASE_BIN and NEW_BIN are the bin/ folders of two builds (e.g. one of the commit before a
change, copied aside, and build/bin). Each round runs every measurement once with each
build, the order alternating per round (ABBA...), so drift of a shared machine falls on
both alike:

  * train_bench (one process): CPU ms/step, the child's user+system CPU time of a run with
    S + W steps minus one with W steps, over S (bench/train/ab_cpu.py's method: set-up and
    warm-up cancel; time spent waiting for a core is not counted);
  * ddp_bench --variants ft (W = 2 under the launcher, fault tolerance on): its median
    wall ms/step.

Prints each build's median per measurement and the paired new/base ratios per round: their
median and range. A change is "within noise" when the median paired ratio is within the
spread that the same build shows between rounds (the larger of the two builds' relative
median absolute deviations, at least 1 %).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def cpu_seconds(cmd):
    t0 = os.times()
    subprocess.run(cmd, check=True, capture_output=True)
    t1 = os.times()
    return (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)


def train_bench_ms(bin_dir, model):
    steps, warm = (100, 10) if model == "cnn" else (400, 40)
    exe = os.path.join(bin_dir, "train_bench")
    run = lambda n: cpu_seconds([exe, "--model", model, "--steps", str(n)])
    return 1000.0 * (run(steps + warm) - run(warm)) / steps


def ddp_bench_ms(bin_dir, model):
    steps = "60" if model == "cnn" else "200"
    out = subprocess.run([os.path.join(bin_dir, "ddp_bench"), "--model", model, "--variants", "ft", "--rounds", "1",
                          "--steps", steps], check=True, capture_output=True, text=True)
    m = re.search(r"^ft\s+median ([0-9.]+) ms/step", out.stdout + out.stderr, re.M)
    if not m:
        sys.exit(f"ddp_bench in {bin_dir}: no 'ft median N ms/step' line in its output:\n{out.stdout}{out.stderr}")
    return float(m.group(1))


def rel_mad(v):
    med = statistics.median(v)
    return statistics.median(abs(x - med) for x in v) / med if med else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--models", default="mlp,cnn")
    a = ap.parse_args()
    for d in (a.base, a.new):
        for exe in ("train_bench", "ddp_bench", "ringfence"):
            if not os.access(os.path.join(d, exe), os.X_OK):
                sys.exit(f"{d}: no executable {exe} (pass a build's bin/ folder)")
    models = [m for m in a.models.split(",") if m]
    benches = [(f"train_bench {m}", train_bench_ms, m) for m in models] + \
              [(f"ddp_bench {m} W=2", ddp_bench_ms, m) for m in models]
    res = {(name, which): [] for name, _, _ in benches for which in ("base", "new")}
    for r in range(a.rounds):
        order = (("base", a.base), ("new", a.new)) if r % 2 == 0 else (("new", a.new), ("base", a.base))
        for name, fn, model in benches:
            for which, d in order:
                res[(name, which)].append(fn(d, model))
        print(f"# round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    print(f"# {a.rounds} rounds, order alternating; base {a.base}, new {a.new}")
    print(f"# {'measurement':22s} {'base ms':>9s} {'new ms':>9s}  new/base median [min, max]  noise  verdict")
    for name, _, _ in benches:
        b, n = res[(name, "base")], res[(name, "new")]
        ratios = [y / x for x, y in zip(b, n)]
        med = statistics.median(ratios)
        noise = max(rel_mad(b), rel_mad(n), 0.01)
        verdict = "within noise" if abs(med - 1.0) <= noise else ("SLOWER" if med > 1.0 else "faster")
        print(f"  {name:22s} {statistics.median(b):9.3f} {statistics.median(n):9.3f}  "
              f"{med:.3f} [{min(ratios):.3f}, {max(ratios):.3f}]  {100 * noise:4.1f} %  {verdict}")
    print("# load average", " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
