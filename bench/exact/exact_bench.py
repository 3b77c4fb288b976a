#!/usr/bin/env python3
"""Exact mode against the float sum, in the same run (docs/exact.md).

    python3 bench/exact/exact_bench.py [--build build] [--steps 150] [--rounds 2]
                                       [--worlds 1,4] [--models mlp,cnn] [--drift-steps 1,50,100,150]

1. Throughput: `ringfence run -n W -- train_<model> --max-steps N` with and without
   --exact (8 micro-shards, Fashion-MNIST, batch 128), alternating, --rounds times each;
   the best samples/s of each (the training loop's own rate from --metrics) and the ratio.
2. Bytes per step: what each rank hands its all-reduces (the gradient buckets and the control
   tail: float32, or int64 plus the all-gather of per-tensor maxima), and what a ring sends
   per rank, 2 (W-1)/W of it: computed from the parameter count, not sniffed.
3. Drift (MLP, W = 4): the local error of single updates. From each mode's own checkpoint of
   step s-1 (weights and momentum), a float64 step on batch s computed here (numpy: the
   MLP's forward, backward and SGD with momentum); the error is
   ||update_rf - update_64|| / ||update_64||, update = w_s - w_{s-1}. bench/parity/drift.py's
   one-step method, without PyTorch.
Prints the machine's CPU. The peer is ringfence's own float mode: exact mode's cost is the
question, not ringfence against another framework.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from safetensors_io import read_idx, read_safetensors_f32  # noqa: E402  (torch-free)

MEAN, STD = np.float32(0.2860), np.float32(0.3530)  # core/data/fashion_mnist.cpp


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def train(args, model, world, steps, extra, work):
    metrics = os.path.join(work, "metrics.json")
    cmd = [os.path.join(args.build, "bin", "ringfence"), "run", "-n", str(world), "--quiet", "--",
           os.path.join(args.build, "bin", f"train_{model}"), "--max-steps", str(steps), "--log-interval", "0",
           "--metrics", metrics, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"exact_bench: {' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(metrics) as f:
        m = json.load(f)
    params = int(re.search(r"(\d+) parameters", p.stdout + p.stderr).group(1))
    return m, params


def throughput(args, work):
    rows = []
    for model in args.models:
        for w in args.worlds:
            best = {"float": 0.0, "exact": 0.0}
            acc = {}
            for _ in range(args.rounds):
                for mode, extra in (("float", []), ("exact", ["--exact"])):
                    m, params = train(args, model, w, args.steps, extra, work)
                    best[mode] = max(best[mode], m["samples_per_sec"])
                    acc[mode] = m["test_accuracy"]
            rows.append((model, w, best["float"], best["exact"], params, acc))
            print(f"{model:4} W={w}: float {best['float']:9.0f}  exact {best['exact']:9.0f} samples/s  "
                  f"exact/float {best['exact'] / best['float']:.2f}", flush=True)
    return rows


def wire(params, world, tensors):
    tail = 5  # the control block (4) and the loss
    f = 4 * (params + tail)
    e = 8 * (params + tail) + 4 * (tensors + 1) * world  # + the maxima's all-gather (received)
    ring = 2 * (world - 1) / world
    return f, e, f * ring, 8 * (params + tail) * ring + 4 * (tensors + 1) * (world - 1)


# ---- drift: a float64 MLP step in numpy ------------------------------------------------

def mlp_grads(w, x, y):
    """Mean cross-entropy gradients of the reference MLP (784-512-512-10, ReLU), float64."""
    z1 = x @ w["1.weight"].T + w["1.bias"]
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w["3.weight"].T + w["3.bias"]
    h2 = np.maximum(z2, 0)
    z3 = h2 @ w["5.weight"].T + w["5.bias"]
    p = np.exp(z3 - z3.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    d3 = p / len(y)
    d2 = (d3 @ w["5.weight"]) * (z2 > 0)
    d1 = (d2 @ w["3.weight"]) * (z1 > 0)
    return {"5.weight": d3.T @ h2, "5.bias": d3.sum(0), "3.weight": d2.T @ h1, "3.bias": d2.sum(0),
            "1.weight": d1.T @ x, "1.bias": d1.sum(0)}


def drift(args, work, images, labels):
    names = ["1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"]
    out = {}
    for mode, extra in (("float", []), ("exact", ["--exact"])):
        for s in args.drift_steps:
            # two runs, each ending with its final checkpoint: of step s-1, and of step s
            d = os.path.join(work, f"drift-{mode}-{s}")
            log = os.path.join(work, f"batches-{mode}-{s}.jsonl")
            for steps in (s, s + 1):
                train(args, "mlp", 4, steps, extra + ["--ckpt-dir", f"{d}-{steps}", "--batch-log", log], work)
            before, after = (read_safetensors_f32(os.path.join(f"{d}-{t + 1}", f"ckpt-{t:09d}.safetensors")) for t in (s - 1, s))
            with open(log) as f:
                idx = next(json.loads(l)["indices"] for l in f if json.loads(l)["step"] == s)
            w = {k: before[k].astype(np.float64) for k in names}
            g = mlp_grads(w, images[idx].astype(np.float64), labels[idx])
            num = den = 0.0
            for k in names:
                buf = 0.9 * before[f"optim.{k}.momentum_buffer"].astype(np.float64) + g[k]
                up64 = -0.05 * buf
                up_rf = after[k].astype(np.float64) - w[k]
                num += float(((up_rf - up64) ** 2).sum())
                den += float((up64 ** 2).sum())
            out[(mode, s)] = (num / den) ** 0.5
            for t in (s, s + 1):
                shutil.rmtree(f"{d}-{t}", ignore_errors=True)
    return out


def write_json(args, table, drift_rows):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    common = {"section": "Data-parallel", "commit": commit, "date": time.strftime("%Y-%m-%d"),
              "machine": f"{cpu_name()}, {os.cpu_count()} cores"}
    cmd = f"python3 bench/exact/exact_bench.py --steps {args.steps} --rounds {args.rounds} --json-dir bench/out"
    with open(os.path.join(args.json_dir, "exact_throughput.json"), "w") as f:
        json.dump({**common, "order": 70, "title": "Exact mode against the float sum (docs/exact.md)", "command": cmd,
                   "notes": "Fashion-MNIST, batch 128, 8 micro-shards, the best samples/s of each mode over the "
                            "rounds, alternating in one run; the peer is ringfence's own float sum. Bytes: what "
                            "each rank hands its all-reduces per step, and a ring's 2 (W-1)/W of it on the wire "
                            "(computed from the parameter count).", "rows": table}, f, indent=1)
    with open(os.path.join(args.json_dir, "exact_drift.json"), "w") as f:
        json.dump({**common, "order": 71, "title": "Exact mode: each update's error against float64 (MLP, W = 4)",
                   "command": cmd, "notes": "From each mode's own state after step s-1, a float64 step on batch s "
                   "(numpy); error = ||update - update64|| / ||update64||. The float32 forward and backward of "
                   "each sample dominate both: the exact sum removes only the reduction's rounding.",
                   "rows": drift_rows}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--worlds", default="1,4")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--drift-steps", default="1,50,100,150")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--json-dir", help="also write exact_throughput.json and exact_drift.json there (bench/report.py)")
    args = ap.parse_args()
    args.worlds = [int(x) for x in args.worlds.split(",")]
    args.models = args.models.split(",")
    args.drift_steps = [int(x) for x in args.drift_steps.split(",") if x]
    work = tempfile.mkdtemp(prefix="exact-bench-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        print(f"# exact_bench on {cpu_name()}, {os.cpu_count()} CPUs; {args.steps} steps of batch 128, "
              f"8 micro-shards, best of {args.rounds}; peer: ringfence's float sum, same run", flush=True)
        rows = throughput(args, work)
        table = []
        print("\n| model | W | float samples/s | exact samples/s | exact / float | all-reduce bytes/step/rank float -> "
              "exact | ring wire bytes/rank float -> exact |")
        print("|---|---|---|---|---|---|---|")
        tensors = {"mlp": 6, "cnn": 8}
        for model, w, f, e, params, _ in rows:
            fb, eb, fw, ew = wire(params, w, tensors.get(model, 0))
            print(f"| {model} | {w} | {f:.0f} | {e:.0f} | {e / f:.2f} | {fb / 1e6:.2f} MB -> {eb / 1e6:.2f} MB | "
                  f"{fw / 1e6:.2f} MB -> {ew / 1e6:.2f} MB |")
            table.append({"model": model, "W": w, "float samples/s": round(f), "exact samples/s": round(e),
                          "exact / float": round(e / f, 2), "all-reduce MB/step/rank float": round(fb / 1e6, 2),
                          "exact": round(eb / 1e6, 2), "ring wire MB/rank float": round(fw / 1e6, 2),
                          "exact ": round(ew / 1e6, 2)})
        drift_rows = []
        if args.drift_steps:
            images = read_idx(os.path.join(args.data_dir, "train-images-idx3-ubyte.gz"), 3)
            labels = read_idx(os.path.join(args.data_dir, "train-labels-idx1-ubyte.gz"), 1).astype(np.int64)
            x = ((images.astype(np.float32) / np.float32(255.0) - MEAN) / STD).reshape(len(images), -1)
            d = drift(args, work, x, labels)
            print("\n| MLP, W = 4: step s | float mode: update error vs float64 | exact mode: update error vs float64 |")
            print("|---|---|---|")
            for s in args.drift_steps:
                print(f"| {s} | {d[('float', s)]:.4e} | {d[('exact', s)]:.4e} |")
                drift_rows.append({"step": s, "float mode: update error vs float64": d[("float", s)],
                                   "exact mode": d[("exact", s)]})
        if args.json_dir:
            write_json(args, table, drift_rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
