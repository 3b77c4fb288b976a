#!/usr/bin/python3
"""Draws the benchmark plots into docs/img/ from the same JSON as bench/RESULTS.md
(bench/out/*.json):

  busbw.png            all-reduce busbw against size, each backend and peer, one host and across hosts
  recovery_phases.png  recovery time by phase, stacked, for each fault
  vs_pytorch.png       samples/s against PyTorch, one process and data-parallel
  scale.png            the coordinator's costs against N simulated members, before and after

  /usr/bin/python3 bench/plots.py [--out docs/img]

Needs matplotlib: Debian's python3-matplotlib (`apt-get install python3-matplotlib`, or
`scripts/setup --bench`), hence /usr/bin/python3 (a pyenv or venv python3 on PATH may lack it).
"""
import argparse
import json
import os
import statistics
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("bench/plots.py needs matplotlib: apt-get install python3-matplotlib, then run it with /usr/bin/python3")

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
PHASES = ["detect", "agree", "connect", "transfer", "verify"]
COLORS = {"detect": "#d62728", "agree": "#ff7f0e", "connect": "#2ca02c", "transfer": "#1f77b4", "verify": "#9467bd"}


def load(name):
    with open(os.path.join(OUT, name + ".json")) as f:
        return json.load(f)


def source(d):
    return f"commit {d.get('commit', '?')}, {d.get('date', '?')}"


def size_ticks(ax, sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K" for b in sizes], fontsize=8)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, which="major", alpha=0.3)


def busbw(out):
    one = load("comm_busbw")
    hosts = load("multihost_busbw")
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    series = ["ours", "ours, unregistered", "ours, unregistered, no shm", "Open MPI", "Gloo"]
    for col, w in enumerate((2, 4)):
        ax = axes[0][col]
        rows = [r for r in one["rows"] if r["W"] == w]
        sizes = [r["bytes"] for r in rows]
        for s in series:
            ax.plot(sizes, [r[s] for r in rows], marker="o", label=s)
        size_ticks(ax, sizes)
        ax.set_title(f"one host, shared memory, W = {w}\n({source(one)}; loaded 2-core VM)", fontsize=9)
        ax.legend(fontsize=7)
        ax = axes[1][col]
        rows = hosts["busbw_GBps"].get(str(w), [])
        sizes = [r["bytes"] for r in rows]
        ax.plot(sizes, [r["ours"] for r in rows], marker="o", label="ours (UCX over TCP)")
        ax.plot(sizes, [r["mpi_default"] for r in rows], marker="s", label="Open MPI, default")
        ax.plot(sizes, [r["mpi_ring"] for r in rows], marker="^", label="Open MPI, ring")
        size_ticks(ax, sizes)
        ax.set_title(f"across hosts (network namespaces, TCP), W = {w}\n({source(hosts)})", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("All-reduce bus bandwidth against size (float32 sum)")
    fig.tight_layout()
    save(fig, out, "busbw.png")


def recovery(out):
    one = load("recovery_phases")
    hosts = load("multihost_recovery")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [4, 3]})
    panels = [([f"{r['model']}\n{r['fault']}" for r in one["rows"]], [{k: r[k] for k in PHASES} for r in one["rows"]],
               f"one host, W = 2 ({source(one)})")]
    labels, values = [], []
    for fault, rows in hosts["results"].items():
        if rows:
            labels.append(fault.replace("_", " "))
            values.append({k: statistics.median(x.get(k, 0.0) for x in rows) for k in PHASES})
    panels.append((labels, values, f"3 hosts x 2 workers, medians ({source(hosts)})"))
    for ax, (labels, values, title) in zip(axes, panels):
        bottom = [0.0] * len(labels)
        for k in PHASES:
            v = [x[k] for x in values]
            ax.bar(labels, v, bottom=bottom, label=k, color=COLORS[k])
            bottom = [a + b for a, b in zip(bottom, v)]
        for i, total in enumerate(bottom):
            ax.text(i, total, f"{total:.0f}", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("ms")
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Recovery time by phase (from the failure being seen to the new generation running)")
    fig.tight_layout()
    save(fig, out, "recovery_phases.png")


def vs_pytorch(out):
    single = load("train_vs_torch")
    ddp = load("ddp_vs_torch")
    fig, axes = plt.subplots(1, 3, figsize=(12, 4), gridspec_kw={"width_ratios": [1, 1, 1.4]})
    for ax, r in zip(axes, single["rows"]):
        v = [r["PyTorch samples/s"], r["ringfence samples/s"]]
        ax.bar(["PyTorch 1.13", "ringfence"], v, color=["#1f77b4", "#ff7f0e"])
        for i, y in enumerate(v):
            ax.text(i, y, f"{y:,}", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("samples/s")
        ax.set_title(f"{r['model']}, one process: {r['ratio (best)']}", fontsize=9)
    axes[0].annotate(f"1 thread, batch 128 ({source(single)})", (0, -0.16), xycoords="axes fraction", fontsize=8)
    ax = axes[2]
    ratios = [float(r["ringfence / PyTorch DDP"].rstrip("x")) for r in ddp["rows"]]
    ax.bar([r["model"] for r in ddp["rows"]], ratios, color="#ff7f0e")
    ax.axhline(1.0, color="black", linewidth=0.8)
    for i, v in enumerate(ratios):
        ax.text(i, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("ringfence / PyTorch DDP (samples/s)")
    ax.set_title(f"data-parallel, W = 2, global batch 128\n({source(ddp)})", fontsize=9)
    fig.suptitle("Training speed against PyTorch (CPU)")
    fig.tight_layout()
    save(fig, out, "vs_pytorch.png")


def scale(out):
    """Cost against N, log-log, before and after the coordinator's design change (and with
    etcd): steady CPU, heartbeat round trip p99, revoke to RUNNING, memory. A run that broke
    at some N ends its line there."""
    runs = [(f"{c}, {lab}", load(f"scale_{c}_{lab}")) for c in ("embedded", "etcd") for lab in ("before", "after")
            if os.path.exists(os.path.join(OUT, f"scale_{c}_{lab}.json"))]
    panels = [("coord_cpu_pct", "coordinator CPU, steady (% of a core)"), ("rtt_p99_ms", "heartbeat round trip p99 (ms)"),
              ("d1_revoke_to_running_ms", "revoke -> RUNNING (ms)"), ("coord_rss_mb", "coordinator memory (MB)")]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (key, title) in zip([a for row in axes for a in row], panels):
        for name, d in runs:
            rows = [r for r in d["rows"] if key in r and r[key]]
            ax.plot([r["N"] for r in rows], [r[key] for r in rows], marker="o", label=name,
                    linestyle="--" if "before" in name else "-")
        ns = sorted({r["N"] for _, d in runs for r in d["rows"]})
        if ns:  # a linear reference through the first point of the first run
            ax.plot(ns, [ns[i] / ns[0] for i in range(len(ns))], color="grey", alpha=0.3, label="linear (shape)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("simulated members N")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if runs:
        fig.suptitle(f"Control plane against N (bench/scale/scale_bench.py; {source(runs[-1][1])})", fontsize=10)
    save(fig, out, "scale.png")


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser(description="benchmark plots from bench/out/*.json")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "docs", "img"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    busbw(a.out)
    recovery(a.out)
    vs_pytorch(a.out)
    scale(a.out)


if __name__ == "__main__":
    main()
