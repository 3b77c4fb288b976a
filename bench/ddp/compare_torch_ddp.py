#!/usr/bin/env python3
"""Data-parallel speed, side by side in one run: PyTorch DDP with gloo vs ringfence's
resilient Trainer (ddp_bench's "ft" variant: fault tolerance on, overlap on), the same
reference model, global batch and W, one thread per rank, synthetic 28x28 data, SGD
momentum. Alternates the two --repeats times and keeps the best of each (the least
disturbed on a shared machine); prints samples/s and the ratio ringfence / PyTorch.
PyTorch must run an optimized BLAS (bench/peer_blas.py): the BLAS this process loads after a
matmul (the ranks, started with the same environment, load the same) is printed, and when it
is not one the script prints a "no ratio:" line, measures nothing and exits 2.

  /usr/bin/python3 bench/ddp/compare_torch_ddp.py [--bin build/bin] [--world 2] [--batch 128]
      [--models mlp,cnn] [--steps 150] [--warmup 20] [--repeats 3]
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


def torch_rank(rank, world, name, batch, steps, warmup, port, out):
    import torch
    import torch.distributed as dist
    from torch import nn
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(torch_model(name, nn))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    local = batch // world
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(local, 1, 28, 28, generator=g) * 3 - 1
    y = torch.randint(0, 10, (local,), generator=g)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    dist.destroy_process_group()
    if rank == 0:
        t = sorted(times[warmup:])
        with open(out, "w") as f:
            f.write(f"{t[len(t) // 2] * 1000}\n")


def bench_torch(args, name, port):
    import torch.multiprocessing as mp
    out = f"/tmp/torch_ddp_{os.getpid()}.txt"
    mp.spawn(torch_rank, args=(args.world, name, args.batch, args.steps, args.warmup, port, out), nprocs=args.world)
    with open(out) as f:
        ms = float(f.read())
    os.remove(out)
    return ms


def bench_ringfence(args, name):
    p = subprocess.run([os.path.join(args.bin, "ddp_bench"), "--model", name, "--world", str(args.world), "--batch",
                        str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup), "--rounds", "1",
                        "--variants", "ft"], capture_output=True, text=True, timeout=600)
    m = re.search(r"^ft\s+(?:median\s+)?([0-9.]+) ms/step", p.stdout, re.M)
    if p.returncode != 0 or not m:
        sys.exit(f"ddp_bench failed:\n{p.stdout}\n{p.stderr}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the table there (bench/out/ddp_vs_torch.json for RESULTS.md)")
    args = ap.parse_args()
    # The peer at its best: the fastest OpenBLAS kernel this CPU runs, set before torch loads
    # (the ranks mp.spawn starts inherit it).
    choice = best_openblas(1)
    apply_env(choice)
    print(f"# {choice['line']}")
    import torch
    torch.ones(64, 64) @ torch.ones(64, 64)  # a BLAS loaded on first use is mapped from here on
    blas = loaded_blas(torch.__config__.show())
    print(f"# torch {torch.__version__}, BLAS: {describe(blas)}")
    if refusal(blas):
        print(refusal(blas), flush=True)
        sys.exit(2)
    print(f"# W={args.world}, global batch {args.batch}, 1 thread per rank; median step time, best of {args.repeats}")
    port = 29500 + os.getpid() % 1000
    rows = []
    for name in args.models.split(","):
        tt, rr = [], []
        for r in range(args.repeats):
            tt.append(bench_torch(args, name, port + r))
            rr.append(bench_ringfence(args, name))
            print(f"{name} repeat {r}: pytorch-ddp-gloo {tt[-1]:.3f} ms, ringfence {rr[-1]:.3f} ms", flush=True)
        t, f = min(tt), min(rr)
        print(f"{name}: pytorch DDP gloo {1000 * args.batch / t:8.0f} samples/s | ringfence {1000 * args.batch / f:8.0f} "
              f"samples/s | ratio {t / f:.2f}x")
        rows.append({"model": name.upper(), "PyTorch DDP samples/s": round(1000 * args.batch / t),
                     "ringfence samples/s": round(1000 * args.batch / f), "ringfence / PyTorch DDP": f"{t / f:.2f}x"})
    if args.json:
        write_result(args.json, "Data-parallel", 60, f"Samples/s against PyTorch DDP (gloo), W = {args.world}",
                     f"W = {args.world}, one thread per rank, global batch {args.batch}; best of {args.repeats} median "
                     f"step times; ratio = ringfence / PyTorch DDP samples/s.", rows, choice)


if __name__ == "__main__":
    main()
