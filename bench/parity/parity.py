#!/usr/bin/env python3
"""Golden equivalence with PyTorch: ringfence and PyTorch train the same model
from the same initial weights on the same batches, and their losses must agree.

For each model (MLP, CNN) this script
  1. builds the PyTorch model with our architecture and parameter names (Sequential
     indices: "1.weight", "3.bias", ...) and writes its initial weights as safetensors;
  2. runs ringfence's train_mlp / train_cnn with --init FILE --max-steps N --loss-log L
     --batch-log B (B records the sample indices of every global batch);
  3. trains PyTorch (SGD lr 0.05, momentum 0.9, cross-entropy mean) on exactly those
     batches, reading Fashion-MNIST's IDX files with gzip + numpy and normalising as
     ringfence does: (x/255 - 0.2860)/0.3530 in float32;
  4. compares the losses at steps 0, 50, 100, 150: PASS when within 2 % of PyTorch's.

The loss of one batch at one step is a sensitive quantity: with lr 0.05 and momentum 0.9
the trajectory amplifies float32 rounding differences exponentially, so two correct
implementations drift apart after some tens of steps. To tell drift from a bug the script
also trains PyTorch in float64 from the same weights on the same batches and prints how far
PyTorch's own float32 run is from it ("fp32 noise"): a ringfence difference of the same
size as PyTorch's own is rounding, one far larger is not. It also compares the mean loss
over the 10 steps ending at each checkpoint, which averages out batch-to-batch noise.
It also measures PyTorch's distance from ITSELF in float32, in the same run: PyTorch with
2 threads instead of 1 (intra-op threads), and PyTorch fed each batch's samples in
reverse order (mathematically the same loss and gradient, summed in another order). Those
columns are the noise floor: if ringfence is no further from PyTorch than PyTorch is from
itself, the difference is rounding, not semantics.
For the CNN the floor has a fourth column: PyTorch float32 with its oneDNN (mkldnn)
convolutions switched off, so that it computes them with its own im2col + BLAS kernels —
the same framework, the same model, weights and batches, another correct convolution
algorithm. That is exactly the relation between ringfence and PyTorch, so it shows how
far two correct implementations drift apart by rounding alone.
For the CNN it trains PyTorch float32 once more with its convolutions computed as
unfold + matmul (im2col + GEMM, the algorithm ringfence uses): that run drifts from
float64 as fast as ringfence does, which shows the CNN's faster drift comes from the
algorithm's rounding, not from a different computation.

A second, model-level comparison removes the batch-to-batch noise: the loss of each
framework's MODEL at each checked step on the whole 10k-image test set. ringfence's
weights come from its own checkpoints (--ckpt-every 50 writes the state after steps 49,
99, 149: the weights that the losses of steps 50, 100, 150 were computed with); PyTorch's
are copied before its update of the same step; both are evaluated by the same float64
PyTorch forward pass, so only the weights differ. Both comparisons are printed; the
exit status follows the strict per-batch check unless --gate held-out is given.

Run it with Debian's /usr/bin/python3 (python3-torch):
    /usr/bin/python3 bench/parity/parity.py --bin build/bin
Exit status 0 when every comparison passes, 1 when one fails, 2 on a usage/set-up error.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import read_idx, read_safetensors_f32  # noqa: E402,F401  (torch-free: bench/exact uses them too)

MEAN, STD = np.float32(0.2860), np.float32(0.3530)


def make_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(1568, 128), nn.ReLU(), nn.Linear(128, 10))


class Im2colConv2d(nn.Module):
    """Conv2d (stride 1) as unfold + matmul over the same parameters: im2col + GEMM."""

    def __init__(self, conv):
        super().__init__()
        self.weight, self.bias, self.padding = conv.weight, conv.bias, conv.padding
        self.k = conv.kernel_size

    def forward(self, x):
        n, _, h, w = x.shape
        oc = self.weight.shape[0]
        cols = nn.functional.unfold(x, self.k, padding=self.padding)  # n, c*kh*kw, h*w
        return (self.weight.view(oc, -1) @ cols + self.bias.view(1, oc, 1)).view(n, oc, h, w)


def write_safetensors(path, tensors):
    """Writes float32 tensors as safetensors. Uses the `safetensors` package when it is
    installed; otherwise writes the format by hand: u64 little-endian header length,
    JSON header, raw little-endian data."""
    try:
        from safetensors.numpy import save_file
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path)
        return "safetensors package"
    except ImportError:
        pass
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return "hand-written"


def heldout_loss(kind, weights, test_x, test_y):
    """Mean cross-entropy of the model with `weights` on the test set, in float64."""
    model = make_model(kind).double()
    names = model.state_dict().keys()
    model.load_state_dict({k: torch.from_numpy(np.asarray(weights[k])).double() for k in names})
    with torch.no_grad():
        return nn.functional.cross_entropy(model(test_x.double()), test_y).item()


def load_train(data_dir, prefix="train"):
    def pick(stem):
        for name in (stem + ".gz", stem):
            p = os.path.join(data_dir, name)
            if os.path.exists(p):
                return p
        sys.exit(f"parity: {os.path.join(data_dir, stem)}(.gz) not found (--data-dir?)")
    images = read_idx(pick(f"{prefix}-images-idx3-ubyte"), 3)
    labels = read_idx(pick(f"{prefix}-labels-idx1-ubyte"), 1)
    # Same float32 operations in the same order as core/data/fashion_mnist.cpp.
    x = (images.astype(np.float32) / np.float32(255.0) - MEAN) / STD
    return torch.from_numpy(x.reshape(-1, 1, 28, 28).copy()), torch.from_numpy(labels.astype(np.int64))


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_one(kind, args, images, labels, test_x, test_y, work):
    torch.manual_seed(args.seed)
    model = make_model(kind)
    init = os.path.join(work, f"{kind}_init.safetensors")
    how = write_safetensors(init, {k: v.detach().numpy() for k, v in model.state_dict().items()})
    loss_log, batch_log = os.path.join(work, f"{kind}_loss.jsonl"), os.path.join(work, f"{kind}_batch.jsonl")
    exe = os.path.join(args.bin, f"train_{kind}")
    if not os.access(exe, os.X_OK):
        sys.exit(f"parity: {exe} not found or not executable (--bin DIR: where train_mlp/train_cnn are)")
    cmd = [exe, "--init", init, "--max-steps", str(args.steps), "--loss-log", loss_log, "--batch-log", batch_log,
           "--data-dir", args.data_dir, "--threads", str(args.threads), "--batch", str(args.batch),
           "--lr", str(args.lr), "--momentum", str(args.momentum), "--seed", str(args.seed)]
    ckpt_dir = os.path.join(work, f"{kind}_ckpt")
    ckpt_every = 50
    if any(s % ckpt_every for s in args.check):
        sys.exit(f"parity: --check steps must be multiples of {ckpt_every} (checkpoints hold the weights)")
    cmd += ["--ckpt-dir", ckpt_dir, "--ckpt-every", str(ckpt_every), "--ckpt-keep", "1000"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    t_rf = time.time() - t0
    if proc.returncode != 0:
        sys.exit(f"parity: {' '.join(cmd)} failed with exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    rf_loss = {e["step"]: float(e["loss"]) for e in read_jsonl(loss_log)}
    batches = read_jsonl(batch_log)
    if len(batches) != args.steps or [b["step"] for b in batches] != list(range(args.steps)):
        sys.exit(f"parity: {batch_log} has {len(batches)} steps, expected 0..{args.steps - 1}")

    for b in batches:
        if len(b["indices"]) != args.batch:
            sys.exit(f"parity: step {b['step']} has {len(b['indices'])} samples, expected {args.batch}")
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    t0 = time.time()
    torch_weights = {}
    torch_loss = train_torch(model, batches, images, labels, args, torch.float32, snapshot=(args.check, torch_weights))
    t_torch = time.time() - t0
    model64 = make_model(kind)
    model64.load_state_dict(init_state)
    fp64_loss = train_torch(model64.double(), batches, images, labels, args, torch.float64)
    # PyTorch against itself, float32 both: another thread count (a different split of the
    # work where its kernels split reductions) and the batch's samples in reverse order.
    pt_variants = {}
    for name, kw in (("t2", dict(threads=2 if args.threads != 2 else 1)), ("rev", dict(reverse=True))):
        m = make_model(kind)
        m.load_state_dict(init_state)
        pt_variants[name] = train_torch(m, batches, images, labels, args, torch.float32, **kw)
    im2col_loss = None
    if kind == "cnn":
        m = make_model(kind)
        m.load_state_dict(init_state)
        with torch.backends.mkldnn.flags(enabled=False):
            pt_variants["backend"] = train_torch(m, batches, images, labels, args, torch.float32)
        model_i = make_model(kind)
        model_i.load_state_dict(init_state)
        for i, layer in enumerate(model_i):
            if isinstance(layer, nn.Conv2d):
                model_i[i] = Im2colConv2d(layer)
        im2col_loss = train_torch(model_i, batches, images, labels, args, torch.float32)
    rows = []
    for s in args.check:
        if any(s not in L for L in (rf_loss, torch_loss)):
            sys.exit(f"parity: no loss logged for step {s} (ran {args.steps} steps)")
        window = range(max(0, s - 9), s + 1)
        mean = lambda L: sum(L[t] for t in window) / len(window)
        rows.append(dict(model=kind, step=s, rf=rf_loss[s], torch=torch_loss[s], fp64=fp64_loss[s],
                         rel=rel(rf_loss[s], torch_loss[s]), noise=rel(torch_loss[s], fp64_loss[s]),
                         rf64=rel(rf_loss[s], fp64_loss[s]),
                         t2=rel(pt_variants["t2"][s], torch_loss[s]), rev=rel(pt_variants["rev"][s], torch_loss[s]),
                         backend=rel(pt_variants["backend"][s], torch_loss[s]) if "backend" in pt_variants else None,
                         im2col64=rel(im2col_loss[s], fp64_loss[s]) if im2col_loss else None,
                         win_rf=mean(rf_loss), win_torch=mean(torch_loss),
                         win_rel=rel(mean(rf_loss), mean(torch_loss)), win_noise=rel(mean(torch_loss), mean(fp64_loss))))
    init_np = {k: v.numpy() for k, v in init_state.items()}
    for r in rows:
        st = r["step"]
        rf_w = init_np if st == 0 else read_safetensors_f32(os.path.join(ckpt_dir, f"ckpt-{st - 1:09d}.safetensors"))
        r["ho_rf"] = heldout_loss(kind, rf_w, test_x, test_y)
        r["ho_torch"] = heldout_loss(kind, torch_weights[st], test_x, test_y)
        r["ho_rel"] = rel(r["ho_rf"], r["ho_torch"])
    # Before chaos sets in, both runs must agree to float32 rounding: the first update
    # exercises forward, backward and the optimizer (momentum start) in full.
    early = max(rel(rf_loss[t], torch_loss[t]) for t in range(min(11, args.steps)))
    return rows, how, t_rf, t_torch, early


def rel(a, b):
    return abs(a - b) / abs(b)


# A few float32 units (eps 1.19e-7): a loss computed from the same weights by another
# summation order differs by about this much, e.g. at step 0.
ULP_REL = 1e-6


def pct(x):
    """A relative difference in %, with enough digits to tell 1e-7 from 0 (the noise floor
    of a cell can be exactly 0 when PyTorch's variants round identically)."""
    return f"{x * 100:.3f}%" if x * 100 >= 0.0005 or x == 0 else f"{x * 100:.1e}%"


def train_torch(model, batches, images, labels, args, dtype, snapshot=None, threads=None, reverse=False):
    """Trains `model` on the logged batches; returns {step: loss before that step's update}.
    snapshot=(steps, out): copies the weights used at each of `steps` into out[step].
    threads: PyTorch intra-op threads for this run (default --threads); reverse: feed each
    batch's samples in reverse order (the same sums, added in another order)."""
    torch.set_num_threads(threads or args.threads)
    try:
        return _train_torch(model, batches, images, labels, args, dtype, snapshot, reverse)
    finally:
        torch.set_num_threads(args.threads)


def _train_torch(model, batches, images, labels, args, dtype, snapshot, reverse):
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss(reduction="mean")
    losses = {}
    for b in batches:
        idx = torch.tensor(b["indices"][::-1] if reverse else b["indices"], dtype=torch.int64)
        if snapshot and b["step"] in snapshot[0]:
            snapshot[1][b["step"]] = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        loss = loss_fn(model(images[idx].to(dtype)), labels[idx])
        losses[b["step"]] = loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default="build/bin", help="directory holding train_mlp and train_cnn")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--steps", type=int, default=151)
    p.add_argument("--check", default="0,50,100,150", help="steps whose losses are compared")
    p.add_argument("--tolerance", type=float, default=0.02, help="relative, against PyTorch's loss")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--keep", help="keep the init files and logs in this directory")
    p.add_argument("--gate", choices=["batch", "held-out"], default="batch",
                   help="which comparison sets the exit status (both are always printed)")
    args = p.parse_args()
    args.check = [int(s) for s in args.check.split(",")]
    if max(args.check) >= args.steps:
        p.error("--check steps must be below --steps")
    torch.set_num_threads(args.threads)

    images, labels = load_train(args.data_dir)
    test_x, test_y = load_train(args.data_dir, "t10k")
    work = args.keep or tempfile.mkdtemp(prefix="rf_parity_")
    os.makedirs(work, exist_ok=True)
    rows = []
    for kind in args.models.split(","):
        if kind not in ("mlp", "cnn"):
            p.error(f"unknown model '{kind}' (mlp, cnn)")
        r, how, t_rf, t_torch, early = run_one(kind, args, images, labels, test_x, test_y, work)
        print(f"{kind}: init written with the {how}; {args.steps} steps: ringfence {t_rf:.1f} s (incl. data load), "
              f"PyTorch {t_torch:.1f} s; largest relative loss difference over steps 0-10: {early:.1e}")
        rows += r
    print()
    print("loss of the batch at each step (the check: ringfence within the tolerance of PyTorch fp32;")
    print("fp32 noise = PyTorch fp32 vs PyTorch fp64, rf vs fp64 = ringfence vs PyTorch fp64,")
    print("im2col vs fp64 = PyTorch fp32 with unfold+matmul convolutions vs PyTorch fp64)")
    print(f"{'model':<6}{'step':>5}{'ringfence':>11}{'pytorch':>11}{'rel diff':>10}  {'result':<7}"
          f"{'pytorch64':>11}{'fp32 noise':>11}{'rf vs fp64':>11}{'im2col vs fp64':>15}")
    for r in rows:
        ok = r["rel"] <= args.tolerance
        print(f"{r['model']:<6}{r['step']:>5}{r['rf']:>11.5f}{r['torch']:>11.5f}{r['rel'] * 100:>9.3f}%  "
              f"{'PASS' if ok else 'FAIL':<7}{r['fp64']:>11.5f}{r['noise'] * 100:>10.3f}%{r['rf64'] * 100:>10.3f}%"
              + (f"{r['im2col64'] * 100:>14.3f}%" if r["im2col64"] is not None else f"{'-':>15}"))
    print()
    print("noise floor: the same PyTorch fp32 run against PyTorch itself, relative loss difference at each step")
    print(f"(fp32 vs fp64; {args.threads} vs {2 if args.threads != 2 else 1} threads; samples of each batch in reverse order;")
    print(" CNN only: PyTorch's own im2col + BLAS convolutions instead of oneDNN's). floor = the largest of them;")
    print("'within floor' when ringfence vs PyTorch fp32 is no further than PyTorch is from itself; below 0.0005 % the")
    print("differences are printed in full, since a floor of 0 (PyTorch's variants bitwise equal) is beaten by one ulp")
    print(f"{'model':<6}{'step':>5}{'rf vs pt':>10}{'fp32/fp64':>11}{'threads':>10}{'reversed':>10}{'backend':>10}"
          f"{'floor':>10}  verdict")
    for r in rows:
        floor = max(r["noise"], r["t2"], r["rev"], r["backend"] or 0.0)
        verdict = "within floor" if r["rel"] <= floor else "above floor"
        if r["rel"] > floor and r["rel"] <= ULP_REL:
            verdict += " (by < 1e-6: float32 units)"
        print(f"{r['model']:<6}{r['step']:>5}{pct(r['rel']):>10}{pct(r['noise']):>11}{pct(r['t2']):>10}"
              f"{pct(r['rev']):>10}{pct(r['backend']) if r['backend'] is not None else '-':>10}{pct(floor):>10}  {verdict}")
    print()
    print("mean loss over the 10 steps ending at each step (diagnostic)")
    print(f"{'model':<6}{'step':>5}{'ringfence':>11}{'pytorch':>11}{'rel diff':>10}{'fp32 noise':>12}")
    for r in rows:
        print(f"{r['model']:<6}{r['step']:>5}{r['win_rf']:>11.5f}{r['win_torch']:>11.5f}{r['win_rel'] * 100:>9.3f}%"
              f"{r['win_noise'] * 100:>11.3f}%")
    print()
    print("loss of the model at each step on the 10k test set, both evaluated in float64 (weights differ only)")
    print(f"{'model':<6}{'step':>5}{'ringfence':>11}{'pytorch':>11}{'rel diff':>10}  result")
    for r in rows:
        print(f"{r['model']:<6}{r['step']:>5}{r['ho_rf']:>11.5f}{r['ho_torch']:>11.5f}{r['ho_rel'] * 100:>9.3f}%  "
              f"{'PASS' if r['ho_rel'] <= args.tolerance else 'FAIL'}")
    bad_batch = sum(1 for r in rows if r["rel"] > args.tolerance)
    bad_ho = sum(1 for r in rows if r["ho_rel"] > args.tolerance)
    # The same criterion applied to PyTorch against itself: each float32 variant of PyTorch
    # in ringfence's place (cells where the variant ran).
    self_check = []
    for key, what in (("t2", "other thread count"), ("rev", "reversed samples"), ("backend", "other conv backend")):
        cells = [r[key] for r in rows if r[key] is not None]
        self_check.append(f"{what} {sum(1 for x in cells if x <= args.tolerance)}/{len(cells)}")
    print(f"the same check, PyTorch fp32 against PyTorch fp32 (cells within {args.tolerance * 100:g} %): "
          + ", ".join(self_check))
    bad = bad_batch if args.gate == "batch" else bad_ho
    print(f"{len(rows) - bad} passed, {bad} failed (gate: {args.gate})")
    if not args.keep:
        import shutil
        shutil.rmtree(work)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
