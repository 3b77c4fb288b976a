#!/usr/bin/env python3
"""Side-by-side training throughput on one GPU: PyTorch (eager, cuDNN/cuBLAS) against
ringfence (train_bench --device cuda), same model, batch and step (forward, cross-entropy,
backward, SGD momentum update) on a fixed random batch already on the device, in one run.
Prints both and the ratio ringfence / PyTorch, and writes them as JSON.

  python3 bench/train/compare_torch_gpu.py [--bin build/bin] [--device cuda:0] [--batches 128,1024]
      [--models mlp,cnn] [--steps-mlp 300] [--steps-cnn 100] [--warmup 20] [--repeats 3] [--json FILE]

Same arithmetic on both sides: fp32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32 False, matmul precision "highest"; ringfence's cuBLAS runs
CUBLAS_DEFAULT_MATH). PyTorch at its best otherwise: cudnn.benchmark on (autotuned during
the warm-up), SGD's fused CUDA kernel where this torch has it, gradients set to None.
Both time warm-up steps first, then the timed steps between two device synchronisations
(PyTorch: CUDA events; ringfence: its runtime's synchronize and a wall clock), so kernels
are timed, not just launched. The two are measured alternately --repeats times and the best
of each is kept; the median of the paired ratios is printed too.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_models import torch_model  # noqa: E402


def make_sgd(torch, params):
    try:
        return torch.optim.SGD(params, lr=0.05, momentum=0.9, fused=True), "fused"
    except (TypeError, RuntimeError, ValueError):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9), "default (foreach)"


def nccl_version(torch):
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except (AttributeError, RuntimeError):
        return None


def bench_torch(torch, device, name, batch, steps, warmup):
    from torch import nn
    torch.manual_seed(0)
    model = torch_model(name, nn).to(device)
    opt, _ = make_sgd(torch, model.parameters())
    x = (torch.rand(batch, 1, 28, 28) * 3 - 1).to(device)
    y = torch.randint(0, 10, (batch,)).to(device)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return steps * batch / (start.elapsed_time(end) / 1000.0)


def bench_ringfence(bin_dir, device, name, batch, steps, warmup):
    exe = os.path.join(bin_dir, "train_bench")
    cmd = [exe, "--model", name, "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
           "--device", device]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"compare_torch_gpu: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    m = re.search(rf"steps \d+ on {re.escape(device)}: ([0-9.]+) samples/s", p.stdout)
    if not m:
        sys.exit(f"compare_torch_gpu: cannot parse train_bench output (no '... on {device}: N samples/s'): "
                 f"{p.stdout!r}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--batches", default="128,1024")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps-mlp", type=int, default=300)
    ap.add_argument("--steps-cnn", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the settings and results here")
    a = ap.parse_args()
    if not re.fullmatch(r"cuda:\d+", a.device):
        sys.exit(f"compare_torch_gpu: --device {a.device}: want cuda:N")
    import torch
    if not torch.cuda.is_available():
        sys.exit("compare_torch_gpu: torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = True
    torch.cuda.set_device(a.device)
    _, sgd_kind = make_sgd(torch, [torch.zeros(1, device=a.device, requires_grad=True)])
    settings = {
        "gpu": torch.cuda.get_device_name(a.device),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "nccl_in_torch": nccl_version(torch),
        "dtype": "float32",
        "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32},
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "torch_sgd": sgd_kind,
        "torch_mode": "eager (no torch.compile, no CUDA graphs)",
        "ringfence": "train_bench --device, cuBLAS CUBLAS_DEFAULT_MATH (fp32, no TF32), deterministic kernels",
        "warmup_steps": a.warmup,
        "repeats": a.repeats,
    }
    print(f"GPU {settings['gpu']}; torch {settings['torch']} (CUDA {settings['torch_cuda']}, cuDNN "
          f"{settings['cudnn']}); fp32, TF32 off on both sides (torch matmul {settings['tf32']['matmul']}, "
          f"cudnn {settings['tf32']['cudnn']}); cudnn.benchmark {settings['cudnn_benchmark']}; torch SGD "
          f"{sgd_kind}, eager; warm-up {a.warmup} steps, best of {a.repeats}", flush=True)
    print(f"{'model':6} {'batch':>6} {'steps':>6} {'pytorch samples/s':>18} {'ringfence samples/s':>20} "
          f"{'ratio':>7} {'median ratio':>13}", flush=True)
    results = []
    for name in a.models.split(","):
        steps = a.steps_mlp if name == "mlp" else a.steps_cnn
        for batch in [int(b) for b in a.batches.split(",")]:
            pts, rfs = [], []
            for _ in range(max(1, a.repeats)):
                pts.append(bench_torch(torch, a.device, name, batch, steps, a.warmup))
                rfs.append(bench_ringfence(a.bin, a.device, name, batch, steps, a.warmup))
            ratios = sorted(r / p for r, p in zip(rfs, pts))
            pt, rf = max(pts), max(rfs)
            med = ratios[len(ratios) // 2]
            print(f"{name:6} {batch:6d} {steps:6d} {pt:18.0f} {rf:20.0f} {rf / pt:7.2f} {med:13.2f}", flush=True)
            results.append({"model": name, "batch": batch, "steps": steps, "pytorch_samples_per_sec": pt,
                            "ringfence_samples_per_sec": rf, "ratio": rf / pt, "median_ratio": med,
                            "pytorch_all": pts, "ringfence_all": rfs})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": settings, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "results": results}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
