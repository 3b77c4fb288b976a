#!/usr/bin/env python3
"""Side-by-side training throughput: PyTorch (CPU, OpenBLAS) vs ringfence, same model,
batch, thread count and step (forward, cross-entropy, backward, SGD momentum update) on
a fixed random batch, in one run. Prints both and the ratio ringfence / PyTorch.

  /usr/bin/python3 bench/train/compare_torch.py [--bin build/bin] [--batch 128]
      [--threads 1] [--models mlp,cnn] [--steps-mlp 200] [--steps-cnn 40] [--repeats 3]

The two are measured alternately --repeats times and the best of each is kept: on a
shared machine the best run is the one least disturbed by other work. The median ratio is
printed too. Both are also timed in CPU time (PyTorch: process_time of its process;
ringfence: train_bench's "cpu ms/step"), which leaves out time spent waiting for a core:
the "cpu ratio" columns are the figure to trust when the machine is busy.

PyTorch runs the fastest OpenBLAS kernel this CPU can run (bench/peer_blas.py: each
candidate timed and checked in a fresh process, OpenBLAS's own choice among them); the
first line says which it ran and what the others gave. The second names the BLAS this
process really loaded (its mapped files after a matmul). When that is not an optimized BLAS
(Netlib's reference BLAS: Debian's libblas3 without libopenblas0-pthread) the script
prints a "no ratio:" line saying how to install one, measures nothing and exits 2.
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_blas import apply_env, best_openblas, describe, loaded_blas, refusal, write_result  # noqa: E402
from torch_models import torch_model  # noqa: E402


def bench_torch(name, batch, steps, warmup=5):
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = torch_model(name, nn)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.rand(batch, 1, 28, 28) * 3 - 1
    y = torch.randint(0, 10, (batch,))
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    c1 = time.process_time()
    return steps * batch / (time.perf_counter() - t0), 1000 * (c1 - c0) / steps


def bench_ringfence(bin_dir, name, batch, threads, steps):
    exe = os.path.join(bin_dir, "train_bench")
    out = subprocess.run([exe, "--model", name, "--batch", str(batch), "--threads", str(threads),
                          "--steps", str(steps)], check=True, capture_output=True, text=True).stdout
    m = re.search(r"([0-9.]+) samples/s", out)
    if not m:
        sys.exit(f"compare_torch: cannot parse train_bench output: {out!r}")
    c = re.search(r"([0-9.]+) cpu ms/step", out)  # absent from older builds
    return float(m.group(1)), float(c.group(1)) if c else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps-mlp", type=int, default=200)
    ap.add_argument("--steps-cnn", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the table there (bench/out/train_vs_torch.json for RESULTS.md)")
    a = ap.parse_args()
    # Thread count must be fixed before torch initialises its pools.
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    # The peer at its best: the fastest OpenBLAS kernel this CPU runs, set before torch loads.
    choice = best_openblas(a.threads)
    apply_env(choice)
    print(choice["line"])
    import torch
    torch.set_num_threads(a.threads)
    torch.ones(64, 64) @ torch.ones(64, 64)  # a BLAS loaded on first use is mapped from here on
    blas = loaded_blas(torch.__config__.show())
    core = f", core {choice['core']}" if blas["name"] == "OpenBLAS" and choice.get("core") else ""
    print(f"torch {torch.__version__}, BLAS: {describe(blas)}{core}, "
          f"mkldnn: {torch.backends.mkldnn.is_available()}, threads {a.threads}, batch {a.batch}")
    if refusal(blas):
        print(refusal(blas), flush=True)
        sys.exit(2)
    print(f"{'model':6} {'pytorch samples/s':>18} {'ringfence samples/s':>20} {'ratio':>7} {'median ratio':>13}"
          f" {'pytorch cpu ms/step':>20} {'ringfence cpu ms/step':>22} {'cpu ratio':>10} {'median cpu ratio':>17}")
    rows = []
    for name in a.models.split(","):
        steps = a.steps_mlp if name == "mlp" else a.steps_cnn
        pts, rfs, ptc, rfc = [], [], [], []
        for _ in range(max(1, a.repeats)):
            rate, cpu = bench_torch(name, a.batch, steps)
            pts.append(rate)
            ptc.append(cpu)
            rate, cpu = bench_ringfence(a.bin, name, a.batch, a.threads, steps)
            rfs.append(rate)
            rfc.append(cpu)
        ratios = sorted(r / p for r, p in zip(rfs, pts))
        pt, rf = max(pts), max(rfs)
        line = f"{name:6} {pt:18.0f} {rf:20.0f} {rf / pt:7.2f} {ratios[len(ratios) // 2]:13.2f}"
        if None not in rfc:
            cratios = sorted(p / r for r, p in zip(rfc, ptc))
            line += (f" {min(ptc):20.2f} {min(rfc):22.2f} {min(ptc) / min(rfc):10.2f}"
                     f" {cratios[len(cratios) // 2]:17.2f}")
        print(line, flush=True)
        rows.append({"model": name.upper(), "PyTorch samples/s": round(pt), "ringfence samples/s": round(rf),
                     "ratio (best)": f"{rf / pt:.2f}x", "median ratio": f"{ratios[len(ratios) // 2]:.2f}x"})
    if a.json:
        write_result(a.json, "Training, one process", 20, "Samples/s against PyTorch",
                     f"One training step (forward, cross-entropy, backward, SGD momentum) of the reference models, "
                     f"batch {a.batch}, {a.threads} thread(s); PyTorch {torch.__version__}, measured alternately in one "
                     f"run, best of {a.repeats} each; ratio = ringfence / PyTorch.", rows, choice)


if __name__ == "__main__":
    main()
