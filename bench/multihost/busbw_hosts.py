"""All-reduce busbw between test hosts (network namespaces, one rank per host, TCP over
veth): ours (UCX over TCP, UCX_TLS=self,tcp) against Open MPI over TCP (btl self,tcp), the
same sizes in one run, rounds alternated. Open MPI at its best: ranks not bound to cores
(each host's launcher would otherwise bind its rank to core 0: every rank on one core),
socket buffers left to the kernel's autotuning, yielding when idle where ranks outnumber
cores (as Open MPI does itself when it knows it is oversubscribed), and per size the better of its default
all-reduce choice and its ring (coll_tuned algorithm 4). mpirun runs in host 0 and starts
the other ranks through bench/multihost/nsexec instead of ssh.

  python3 bench/multihost/busbw_hosts.py BUILD_BIN_DIR [--ranks 2,4] [--rounds 3] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "multihost"))
import netlab  # noqa: E402

SIZES = ["-b", "64K", "-e", "64M", "-f", "4"]
ROW = re.compile(r"^\s+(\d+)\s+\d+\s+\w+\s+\w+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")
MPI_BASE = ["--allow-run-as-root", "--bind-to", "none", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include",
            f"{netlab.SUBNET}.0/24", "--mca", "oob_tcp_if_include", f"{netlab.SUBNET}.0/24", "--mca",
            "btl_tcp_sndbuf", "0", "--mca", "btl_tcp_rcvbuf", "0"]
MPI_VARIANTS = {"default": [], "ring": ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca",
                                        "coll_tuned_allreduce_algorithm", "4"]}


def rows(text):
    """{bytes: (time_us, busbw, wrong)} from comm_bench's table."""
    out = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            out[int(m.group(1))] = (float(m.group(2)), float(m.group(4)), int(m.group(5)))
    return out


def run_ours(lab, bench, w, iters, tmp):
    store = tempfile.mkdtemp(prefix="store-", dir=tmp)
    procs, logs = [], []
    for i in range(w):
        env = dict(os.environ, RF_BENCH_CHILD="1", RF_RANK=str(i), RF_WORLD=str(w), RF_STORE=store, UCX_TLS="self,tcp",
                   UCX_LOG_LEVEL="error")
        logs.append(os.path.join(tmp, f"ours-{w}-{i}.log"))
        procs.append(lab.spawn(i, [bench, "--backend", "ucx", "--ranks", str(w), *SIZES, "-n", str(iters), "-w", "3"],
                               logs[-1], env=env))
    for p in procs:
        p.wait(timeout=300)
    return rows(open(logs[0]).read())


def run_mpi(lab, bench, w, iters, variant, tmp):
    hosts = ",".join(f"{lab.addr(i)}:1" for i in range(w))
    env = dict(os.environ, RF_NSEXEC_MAP=os.path.join(tmp, "hosts.map"))
    # More ranks than cores: Open MPI yields when idle when it knows it is oversubscribed,
    # but each host's launcher sees one rank on a whole machine; tell it, as it would do.
    yield_idle = ["--mca", "mpi_yield_when_idle", "1"] if w > (os.cpu_count() or 1) else []
    cmd = ["mpirun", *MPI_BASE, *yield_idle, *MPI_VARIANTS[variant], "--mca", "plm_rsh_agent", os.path.join(HERE, "nsexec"),
           "--host", hosts, "-np", str(w), "-x", "RF_BENCH_CHILD=1", bench, "--backend", "mpi", "--ranks", str(w),
           *SIZES, "-n", str(iters), "-w", "3"]
    r = subprocess.run(["ip", "netns", "exec", lab.ns(0), *cmd], capture_output=True, text=True, timeout=300, env=env)
    got = rows(r.stdout)
    if not got:
        print(f"mpi {variant} W={w} gave no table:\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bindir")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", default="bench/out/multihost_busbw.json")
    a = ap.parse_args()
    why = netlab.unavailable_reason()
    if why:
        sys.exit(f"busbw_hosts: cannot make test hosts: {why}")
    bench = os.path.join(os.path.abspath(a.bindir), "comm_bench")
    ranks = [int(x) for x in a.ranks.split(",")]
    tmp = tempfile.mkdtemp(prefix="rf-busbw-hosts-")
    results = {}
    with netlab.Lab(max(ranks)) as lab:
        with open(os.path.join(tmp, "hosts.map"), "w") as f:
            f.writelines(f"{lab.addr(i)} {lab.ns(i)}\n" for i in range(lab.n))
        for w in ranks:
            runs = {"ours": [], "mpi-default": [], "mpi-ring": []}
            for _ in range(a.rounds):  # alternated, so drift on the machine hits all alike
                runs["ours"].append(run_ours(lab, bench, w, a.iters, tmp))
                for v in MPI_VARIANTS:
                    runs[f"mpi-{v}"].append(run_mpi(lab, bench, w, a.iters, v, tmp))
            results[w] = runs
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip()
    mpi_version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"all-reduce busbw between test hosts (TCP over veth, one rank per host; medians of {a.rounds} rounds, "
          f"GB/s); {cpu}, {os.cpu_count()} cores, commit {commit}; {mpi_version}, {' '.join(MPI_BASE)}")
    table = {}
    for w, runs in results.items():
        print(f"\nW={w}\n| size | ours | Open MPI (best: which) | ours / MPI | #wrong |\n|---|---|---|---|---|")
        sizes = sorted(set().union(*[set(r) for r in runs["ours"]]))
        for b in sizes:
            med = {k: statistics.median(r[b][1] for r in rs if b in r) if any(b in r for r in rs) else 0.0
                   for k, rs in runs.items()}
            wrong = sum(r[b][2] for rs in runs.values() for r in rs if b in r)
            best = max(("mpi-default", "mpi-ring"), key=lambda k: med[k])
            ratio = med["ours"] / med[best] if med[best] > 0 else float("nan")
            label = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
            print(f"| {label} | {med['ours']:.3f} | {med[best]:.3f} ({best[4:]}) | {ratio:.2f}x | {wrong} |")
            table.setdefault(str(w), []).append({"bytes": b, "ours": med["ours"], "mpi_default": med["mpi-default"],
                                                 "mpi_ring": med["mpi-ring"], "ratio_vs_best_mpi": ratio,
                                                 "wrong": wrong})
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"command": "python3 " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                   "commit": commit, "cpu": cpu, "cores": os.cpu_count(), "mpi": mpi_version,
                   "mpi_flags": MPI_BASE, "rounds": a.rounds, "busbw_GBps": table}, f, indent=1)
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
