#!/usr/bin/env python3
"""Side-by-side training throughput on one GPU: PyTorch at its best against ringfence
(train_bench --device cuda), same model, batch and step (forward, cross-entropy, backward,
SGD momentum update) on a fixed random batch already on the device, in one run. PyTorch is
measured three ways and the fastest is the peer:
  eager    the step as Python runs it;
  graph    the whole step captured once as a CUDA graph (torch.cuda.graph, after warm-up on
           a side stream) and replayed: no Python, no launch overhead per kernel;
  compile  the model through torch.compile(mode="reduce-overhead") (Inductor's kernels,
           replayed as CUDA graphs), the loss, backward and optimizer eager.
A mode that fails on this device or this torch (compile needs a working Triton) is reported
with its error and left out. Prints each mode's samples/s, which one won, ringfence's and the
ratio ringfence / best, per model and batch, and writes them as JSON.

  python3 bench/train/compare_torch_gpu.py [--bin build/bin] [--device cuda:0] [--batches 128,1024]
      [--models mlp,cnn] [--modes eager,graph,compile] [--steps-mlp 300] [--steps-cnn 100]
      [--warmup 20] [--repeats 3] [--ringfence-cuda-graph] [--json FILE] [--dry-run]

--ringfence-cuda-graph times ringfence's step captured as a CUDA graph and replayed
(train_bench --cuda-graph), the peer of PyTorch's "graph" mode; without it ringfence runs
eagerly.

--dry-run needs no GPU and no ringfence build: every mode runs 3 steps of batch 8 on the CPU
where it can (eager; compile if torch.compile works here; graph needs CUDA and says so), to
check the script's paths; nothing is timed.

Same arithmetic on both sides: fp32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32 False, matmul precision "highest"; ringfence's cuBLAS runs
CUBLAS_DEFAULT_MATH). PyTorch otherwise at its best: cudnn.benchmark on (autotuned during the
warm-up), SGD's fused CUDA kernel where this torch has it. Every mode times warm-up steps
first, then the timed steps between two device synchronisations (PyTorch: CUDA events;
ringfence: its runtime's synchronize and a wall clock), so kernels are timed, not just
launched. PyTorch's modes and ringfence are measured alternately --repeats times and the best
of each is kept; the median of the paired ratios (ringfence / the best mode) is printed too.
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


def torch_step(torch, device, name, batch, mode):
    """One training step of `mode` on a fixed batch: returns a function that runs it."""
    from torch import nn
    torch.manual_seed(0)
    model = torch_model(name, nn).to(device)
    opt, _ = make_sgd(torch, model.parameters())
    x = (torch.rand(batch, 1, 28, 28) * 3 - 1).to(device)
    y = torch.randint(0, 10, (batch,)).to(device)
    loss_fn = nn.CrossEntropyLoss()
    forward = torch.compile(model, mode="reduce-overhead") if mode == "compile" else model

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(forward(x), y).backward()
        opt.step()

    if mode != "graph":
        return step
    if not str(device).startswith("cuda"):
        raise RuntimeError("CUDA graphs need a CUDA device")
    # Warm up on a side stream (the optimizer's state and the autograd buffers are made
    # there), then capture one whole step; replaying it re-runs every kernel on the same
    # memory, x and y included.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss_fn(model(x), y).backward()
        opt.step()
    return graph.replay


def bench_torch(torch, device, name, batch, steps, warmup, mode):
    step = torch_step(torch, device, name, batch, mode)
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


def dry_run(models, modes):
    """Every mode's step, 3 times at batch 8 on the CPU (graph: only with CUDA)."""
    import torch
    print(f"dry run: torch {torch.__version__}, CUDA available {torch.cuda.is_available()}; models {models}, "
          f"modes {modes}; 3 steps of batch 8 each, on the CPU, not timed", flush=True)
    failed = 0
    for name in models:
        for mode in modes:
            if mode == "compile" and not hasattr(torch, "compile"):
                print(f"  {name:4} {mode:8} not in torch {torch.__version__} (torch.compile is 2.0 and later)")
                continue
            try:
                step = torch_step(torch, "cpu", name, 8, mode)
                for _ in range(3):
                    step()
                print(f"  {name:4} {mode:8} ran", flush=True)
            except Exception as e:  # noqa: BLE001  (a mode's failure is reported, as on the GPU)
                expected = mode == "graph"
                failed += 0 if expected else 1
                print(f"  {name:4} {mode:8} {'not on the CPU' if expected else 'FAILED'}: "
                      f"{str(e).splitlines()[0][:200]}", flush=True)
    return 1 if failed else 0


def bench_ringfence(bin_dir, device, name, batch, steps, warmup, cuda_graph=False):
    exe = os.path.join(bin_dir, "train_bench")
    cmd = [exe, "--model", name, "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
           "--device", device] + (["--cuda-graph"] if cuda_graph else [])
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
    ap.add_argument("--modes", default="eager,graph,compile", help="PyTorch's modes to measure")
    ap.add_argument("--ringfence-cuda-graph", action="store_true",
                    help="ringfence's step captured as a CUDA graph (train_bench --cuda-graph)")
    ap.add_argument("--json", help="write the settings and results here")
    ap.add_argument("--dry-run", action="store_true", help="run each mode's step on the CPU, time nothing")
    a = ap.parse_args()
    modes = a.modes.split(",")
    bad = [m for m in modes if m not in ("eager", "graph", "compile")]
    if bad:
        sys.exit(f"compare_torch_gpu: --modes: {bad} not among eager, graph, compile")
    if a.dry_run:
        return dry_run(a.models.split(","), modes)
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
        "torch_modes": modes,
        "ringfence": "train_bench --device" + (" --cuda-graph" if a.ringfence_cuda_graph else "")
                     + ", cuBLAS CUBLAS_DEFAULT_MATH (fp32, no TF32), deterministic kernels",
        "warmup_steps": a.warmup,
        "repeats": a.repeats,
    }
    print(f"GPU {settings['gpu']}; torch {settings['torch']} (CUDA {settings['torch_cuda']}, cuDNN "
          f"{settings['cudnn']}); fp32, TF32 off on both sides (torch matmul {settings['tf32']['matmul']}, "
          f"cudnn {settings['tf32']['cudnn']}); cudnn.benchmark {settings['cudnn_benchmark']}; torch SGD "
          f"{sgd_kind}; modes {', '.join(modes)}; warm-up {a.warmup} steps, best of {a.repeats}", flush=True)
    print(f"{'model':6} {'batch':>6} {'steps':>6} " + "".join(f"{m + ' /s':>14}" for m in modes)
          + f" {'best':>8} {'ringfence /s':>13} {'ratio':>7} {'median ratio':>13}", flush=True)
    results = []
    for name in a.models.split(","):
        steps = a.steps_mlp if name == "mlp" else a.steps_cnn
        for batch in [int(b) for b in a.batches.split(",")]:
            per_mode, errors, rfs = {m: [] for m in modes}, {}, []
            for _ in range(max(1, a.repeats)):
                for m in modes:
                    if m in errors:
                        continue
                    try:
                        per_mode[m].append(bench_torch(torch, a.device, name, batch, steps, a.warmup, m))
                    except Exception as e:  # noqa: BLE001  (a mode that cannot run here is said, not hidden)
                        errors[m] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                rfs.append(bench_ringfence(a.bin, a.device, name, batch, steps, a.warmup, a.ringfence_cuda_graph))
            best_of = {m: max(v) for m, v in per_mode.items() if v}
            if not best_of:
                sys.exit(f"compare_torch_gpu: no PyTorch mode ran for {name} batch {batch}: {errors}")
            winner = max(best_of, key=best_of.get)
            pt, rf = best_of[winner], max(rfs)
            # each round's ratio against that round's best mode
            rounds = [max(v[i] for v in per_mode.values() if len(v) > i) for i in range(len(rfs))]
            ratios = sorted(r / p for r, p in zip(rfs, rounds))
            med = ratios[len(ratios) // 2]
            cells = "".join(f"{best_of[m]:14.0f}" if m in best_of else f"{'failed':>14}" for m in modes)
            print(f"{name:6} {batch:6d} {steps:6d} {cells} {winner:>8} {rf:13.0f} {rf / pt:7.2f} {med:13.2f}",
                  flush=True)
            for m, err in errors.items():
                print(f"       {m} failed: {err}", flush=True)
            results.append({"model": name, "batch": batch, "steps": steps, "pytorch_best_mode": winner,
                            "pytorch_samples_per_sec": pt, "pytorch_by_mode": best_of, "pytorch_failed": errors,
                            "ringfence_samples_per_sec": rf, "ratio": rf / pt, "median_ratio": med,
                            "pytorch_all": per_mode, "ringfence_all": rfs})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": settings, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "results": results}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
