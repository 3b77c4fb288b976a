#!/usr/bin/env python3
"""Step-by-step drift of the weights (a diagnosis): is ringfence's distance from
PyTorch a real semantic difference or float32 rounding?

A real difference (momentum/dampening order, bias init, loss mean, pooling tie-break,
padding) makes the weights differ by a fixed amount per update: ||w_a - w_b|| / ||w_b||
starts at 1e-4..1e-2 after step 1 and grows about linearly. Rounding noise starts at the
float32 unit (~1e-7) and grows geometrically (chaotic amplification at lr 0.05 and
momentum 0.9). This script trains, from the same weights on ringfence's own batches,
  rf      ringfence (weights from its checkpoints, --ckpt-every 1)
  pt32    PyTorch float32, 1 thread (the reference every other run is compared with)
  pt64    PyTorch float64
  pt32t2  PyTorch float32, 2 threads
  pt32rev PyTorch float32, each batch's samples in reverse order (the same sum, added
          in a different order)
  im2col  (CNN) PyTorch float32 with unfold + matmul convolutions (ringfence's algorithm)
and prints, per step (or every --every steps), the relative weight difference of each from pt32 (after the update
of that step) and the relative loss difference (the loss of that step's batch).

It can also measure the local error of single updates (--one-step 1,50,100,149): from
ringfence's own state after step s-1, one PyTorch float64 step on batch s against
ringfence's step s. That compares the two computations without any accumulated drift.

    /usr/bin/python3 bench/parity/drift.py --bin build/bin [--steps 20 --every 1] [--seeds 0,1,2]
    /usr/bin/python3 bench/parity/drift.py --bin build/bin --steps 151 --one-step 1,50,100,150
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parity  # noqa: E402  (same folder: model, data, safetensors helpers)


def train_snapshots(model, batches, images, labels, args, dtype, threads=1, reverse=False):
    """Trains on the logged batches; returns (losses[s], weights[s] after step s's update)."""
    torch.set_num_threads(threads)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss(reduction="mean")
    losses, weights = [], []
    for b in batches:
        idx = torch.tensor(b["indices"][::-1] if reverse else b["indices"], dtype=torch.int64)
        loss = loss_fn(model(images[idx].to(dtype)), labels[idx])
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (b["step"] + 1) % args.every == 0:
            weights.append(flat(model.state_dict(), model.state_dict().keys()))
    torch.set_num_threads(args.threads)
    return losses, dict(zip([s for s in range(len(batches)) if (s + 1) % args.every == 0], weights))


def flat(state, names):
    return np.concatenate([np.asarray(state[k], dtype=np.float64).ravel() for k in names])


def rel_w(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run(kind, seed, args, images, labels, work):
    torch.manual_seed(seed)
    model = parity.make_model(kind)
    names = list(model.state_dict().keys())
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    init = os.path.join(work, f"{kind}{seed}_init.safetensors")
    parity.write_safetensors(init, {k: v.numpy() for k, v in init_state.items()})
    loss_log, batch_log = (os.path.join(work, f"{kind}{seed}_{x}.jsonl") for x in ("loss", "batch"))
    ckpt_dir = os.path.join(work, f"{kind}{seed}_ckpt")
    cmd = [os.path.join(args.bin, f"train_{kind}"), "--init", init, "--max-steps", str(args.steps),
           "--loss-log", loss_log, "--batch-log", batch_log, "--data-dir", args.data_dir, "--threads",
           str(args.threads), "--batch", str(args.batch), "--lr", str(args.lr), "--momentum", str(args.momentum),
           "--seed", str(seed), "--ckpt-dir", ckpt_dir, "--ckpt-every", str(args.every), "--ckpt-keep", "100000",
           "--log-interval", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"drift: {' '.join(cmd)} failed with exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    rf_loss = [e["loss"] for e in sorted(parity.read_jsonl(loss_log), key=lambda e: e["step"])]
    batches = parity.read_jsonl(batch_log)
    # --ckpt-every N writes the state after steps N-1, 2N-1, ...: the rows we print.
    rows = [s for s in range(args.steps) if (s + 1) % args.every == 0]
    rf_w = {s: flat(parity.read_safetensors_f32(os.path.join(ckpt_dir, f"ckpt-{s:09d}.safetensors")), names)
            for s in rows}

    def fresh(convert=None):
        m = parity.make_model(kind)
        m.load_state_dict(init_state)
        return convert(m) if convert else m

    def to_im2col(m):
        for i, layer in enumerate(m):
            if isinstance(layer, nn.Conv2d):
                m[i] = parity.Im2colConv2d(layer)
        return m

    runs = {"rf": (rf_loss, rf_w)}
    ref = train_snapshots(fresh(), batches, images, labels, args, torch.float32)
    runs["pt64"] = train_snapshots(fresh().double(), batches, images, labels, args, torch.float64)
    runs["pt32t2"] = train_snapshots(fresh(), batches, images, labels, args, torch.float32, threads=2)
    runs["pt32rev"] = train_snapshots(fresh(), batches, images, labels, args, torch.float32, reverse=True)
    if kind == "cnn":
        runs["im2col"] = train_snapshots(fresh(to_im2col), batches, images, labels, args, torch.float32)
    out = {}
    for name, (losses, ws) in runs.items():
        out[name] = ({s: parity.rel(losses[s], ref[0][s]) for s in rows}, {s: rel_w(ws[s], ref[1][s]) for s in rows})
    local = {}
    for s in args.one_step:
        if args.every != 1 or s < 1 or s >= args.steps:
            sys.exit("drift: --one-step needs --every 1 and steps in 1..--steps-1")
        local[s] = one_step(kind, ckpt_dir, batches, images, labels, args, s)
    return out, rows, local


def one_step(kind, ckpt_dir, batches, images, labels, args, s):
    """Local error of ONE update, free of accumulated drift: from ringfence's own state after
    step s-1 (weights and momentum buffers), PyTorch float64 and float32 take step s on the
    same batch; returns (loss_rf_vs_pt64, update_rf_vs_pt64, update_pt32_vs_pt64,
    update_im2col_vs_pt64 or None), the update being w_s - w_{s-1}; im2col is PyTorch
    float32 with unfold + matmul convolutions (CNN only). A semantic difference shows here as an O(1e-3..1) relative
    error of the update at every step; rounding as ~1e-7..1e-5."""
    def load(step):
        return parity.read_safetensors_f32(os.path.join(ckpt_dir, f"ckpt-{step:09d}.safetensors"))
    before, after = load(s - 1), load(s)
    names = list(parity.make_model(kind).state_dict().keys())
    w0, w1 = flat(before, names), flat(after, names)
    idx = torch.tensor(batches[s]["indices"], dtype=torch.int64)
    out = {}
    variants = [("pt64", torch.float64), ("pt32", torch.float32)] + ([("im2col", torch.float32)] if kind == "cnn" else [])
    for name, dtype in variants:
        m = parity.make_model(kind).to(dtype)
        m.load_state_dict({k: torch.from_numpy(before[k]).to(dtype) for k in names})
        if name == "im2col":
            for i, layer in enumerate(m):
                if isinstance(layer, nn.Conv2d):
                    m[i] = parity.Im2colConv2d(layer)
        opt = torch.optim.SGD(m.parameters(), lr=args.lr, momentum=args.momentum)
        for (k, prm) in m.named_parameters():
            # clone: SGD updates the buffer in place, and from_numpy shares `before`'s memory.
            buf = torch.from_numpy(before[f"optim.{k}.momentum_buffer"]).to(dtype).clone()
            opt.state[prm] = {"momentum_buffer": buf}
        loss = nn.functional.cross_entropy(m(images[idx].to(dtype)), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        out[name] = (loss.item(), flat(m.state_dict(), names))
    loss_rf = parity.read_jsonl(os.path.join(os.path.dirname(ckpt_dir), os.path.basename(ckpt_dir)[:-5] + "_loss.jsonl"))
    loss_rf = {e["step"]: e["loss"] for e in loss_rf}[s]
    d64 = out["pt64"][1] - w0
    upd = lambda w: rel_w(w - w0, d64)
    return (parity.rel(loss_rf, out["pt64"][0]), upd(w1), upd(out["pt32"][1]),
            upd(out["im2col"][1]) if "im2col" in out else None)


def growth(series, lo, hi):
    """Geometric growth factor per step of a positive series between steps lo and hi."""
    a, b = series[lo], series[hi]
    if a <= 0 or b <= 0:
        return float("nan")
    return math.exp((math.log(b) - math.log(a)) / (hi - lo))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--seeds", default="0")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--every", type=int, default=1, help="print the steps s with (s+1) %% every == 0")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--one-step", default="", help="steps s (needs --every 1): one update from ringfence's state s-1")
    args = p.parse_args()
    args.one_step = [int(x) for x in args.one_step.split(",") if x]
    torch.set_num_threads(args.threads)
    images, labels = parity.load_train(args.data_dir)
    work = tempfile.mkdtemp(prefix="rf_drift_")
    try:
        for kind in args.models.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                res, rows, local = run(kind, seed, args, images, labels, work)
                names = list(res)
                print(f"\n{kind} seed {seed}: relative difference from PyTorch fp32 (1 thread), per step")
                print(f"{'step':>4} " + "".join(f"{'w ' + n:>11}" for n in names) + "   "
                      + "".join(f"{'loss ' + n:>13}" for n in names))
                for s in rows:
                    print(f"{s:>4} " + "".join(f"{res[n][1][s]:>11.2e}" for n in names) + "   "
                          + "".join(f"{res[n][0][s]:>13.2e}" for n in names))
                lo, hi = rows[1], rows[-1]
                print(f"w growth per step, steps {lo}..{hi}: "
                      + ", ".join(f"{n} x{growth(res[n][1], lo, hi):.3f}" for n in names))
                if local:
                    print(f"one update from ringfence's state after step s-1 (weights + momentum), batch s:")
                    print(f"{'s':>4}{'loss rf vs pt64':>17}{'update rf vs pt64':>19}{'update pt32 vs pt64':>21}"
                          f"{'update im2col vs pt64':>23}")
                    for s, (l, u, u32, uim) in local.items():
                        print(f"{s:>4}{l:>17.2e}{u:>19.2e}{u32:>21.2e}" + (f"{uim:>23.2e}" if uim is not None else f"{'-':>23}"))
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
