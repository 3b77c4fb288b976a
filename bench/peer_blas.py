"""The peer at its best: which OpenBLAS kernel PyTorch (Debian's, on OpenBLAS) should run.

Debian's OpenBLAS 0.3.21 does not recognise newer Xeons and falls back to its generic
Prescott kernel unless OPENBLAS_CORETYPE names one; some machines set OPENBLAS_CORETYPE
(and OPENBLAS_L2_SIZE) in the environment for older builds' sake, which slows a current
one. So a comparison never trusts the environment: best_openblas() times one GEMM of the
models' shape with each kernel this CPU can run (OpenBLAS's own choice included, with both
variables unset), each in a fresh process that imports torch, checks its result against
float64, and reports the kernel OpenBLAS says it ran (OPENBLAS_VERBOSE=2: "Core: ...").
The caller sets the winner's environment before it imports torch, and prints and records
the choice next to its figures.

    from peer_blas import best_openblas, apply_env
    choice = best_openblas(threads=1)
    apply_env(choice)          # before `import torch`
    print(choice["line"])      # e.g. "peer BLAS: OpenBLAS core SkylakeX (OPENBLAS_CORETYPE=SkylakeX) ..."
"""
import json
import os
import re
import subprocess
import sys

PROBE = r"""
import json, sys, time
import torch
torch.manual_seed(0)
a = torch.rand(512, 784)
b = torch.rand(784, 512)
ref = (a.double() @ b.double())
c = a @ b
err = float(((c.double() - ref).abs().max() / ref.abs().max()))
n = 0
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.4:
    c = a @ b
    n += 1
dt = time.perf_counter() - t0
print(json.dumps({"gflops": 2 * 512 * 784 * 512 * n / dt / 1e9, "rel_err": err}))
"""


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def candidates():
    """Kernels this CPU can run, best first by feature level; None is OpenBLAS's own choice."""
    flags = cpu_flags()
    c = [None]
    if "avx512bf16" in flags:
        c.append("Cooperlake")
    if "avx512f" in flags:
        c.append("SkylakeX")
    if "avx2" in flags:
        c += ["Haswell", "Zen"]
    if "avx" in flags:
        c.append("Sandybridge")
    return c


def probe_env(coretype, threads):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(OPENBLAS_VERBOSE="2", OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def best_openblas(threads=1, python=sys.executable):
    """{"env": {...} to apply, "core": what OpenBLAS ran, "coretype": what was asked (None:
    its own choice), "gflops", "table": every candidate's result, "line": a printable line}."""
    table = []
    for ct in candidates():
        r = subprocess.run([python, "-c", PROBE], env=probe_env(ct, threads), capture_output=True, text=True,
                           timeout=120)
        core = re.search(r"Core:\s*(\S+)", r.stderr)
        row = {"coretype": ct, "core": core.group(1) if core else "?"}
        try:
            row.update(json.loads(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            row.update(gflops=0.0, rel_err=None, error=(r.stderr.strip().splitlines() or ["no output"])[-1])
        row["ok"] = row.get("rel_err") is not None and row["rel_err"] < 1e-4
        table.append(row)
    good = [t for t in table if t["ok"] and t["gflops"] > 0]
    if not good:
        return {"env": {}, "core": "?", "coretype": None, "gflops": 0.0, "table": table,
                "line": "peer BLAS: no kernel passed the probe; the peer runs as the environment has it"}
    best = max(good, key=lambda t: t["gflops"])
    env = {"OPENBLAS_CORETYPE": best["coretype"]} if best["coretype"] else {}
    tried = ", ".join(f"{t['coretype'] or 'auto'}={t['core']} {t['gflops']:.1f}" for t in table)
    asked = f"OPENBLAS_CORETYPE={best['coretype']}" if best["coretype"] else "OpenBLAS's own choice"
    return {"env": env, "core": best["core"], "coretype": best["coretype"], "gflops": best["gflops"], "table": table,
            "line": f"peer BLAS: OpenBLAS core {best['core']} ({asked}); 512x784x512 sgemm GFLOP/s by kernel: {tried}"}


def apply_env(choice):
    """Sets the chosen kernel for this process and its children (before torch is imported)."""
    os.environ.pop("OPENBLAS_CORETYPE", None)
    os.environ.pop("OPENBLAS_L2_SIZE", None)
    os.environ.update(choice["env"])


if __name__ == "__main__":
    c = best_openblas(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(c["line"])


def write_result(path, section, order, title, notes, rows, choice):
    """Writes one benchmark table as bench/out JSON (rendered by bench/report.py), with the
    command, commit, date, machine and the peer's BLAS kernel next to the figures."""
    import platform
    import time
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/out"],
                           capture_output=True, text=True).stdout.strip()
    with open(path, "w") as f:
        json.dump({"section": section, "order": order, "title": title,
                   "command": " ".join(["/usr/bin/python3" if sys.executable == "/usr/bin/python3" else "python3"] +
                                      sys.argv),
                   "commit": commit + (" (with local changes)" if dirty else ""),
                   "date": time.strftime("%Y-%m-%d", time.gmtime()),
                   "machine": f"{cpu}, {os.cpu_count()} cores, {platform.node()}",
                   "notes": notes + f" The {choice['line']}", "rows": rows}, f, indent=1)
