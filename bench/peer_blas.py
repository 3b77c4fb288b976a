"""The peer at its best: which BLAS PyTorch really runs, and which OpenBLAS kernel it should run.

Debian's PyTorch calls whatever libblas.so.3 resolves to: OpenBLAS where libopenblas0-pthread
is installed (`scripts/setup --bench` installs it), Netlib's reference BLAS where only
libblas3 is, many times slower. loaded_blas() says which one a process runs, from the files
mapped into it after a matmul (/proc/self/maps), and whether it is an optimized BLAS
(OpenBLAS, MKL, BLIS); a comparison refuses to report a ratio when it is not
(refusal()): a ratio against a crippled peer measures the peer's installation, not ringfence.

Debian's OpenBLAS 0.3.21 does not recognise newer Xeons and falls back to its generic
Prescott kernel unless OPENBLAS_CORETYPE names one; some machines set OPENBLAS_CORETYPE
(and OPENBLAS_L2_SIZE) in the environment for older builds' sake, which slows a current
one. So a comparison never trusts the environment: best_openblas() times one GEMM of the
models' shape with each kernel this CPU can run (OpenBLAS's own choice included, with both
variables unset), each in a fresh process that imports torch, checks its result against
float64, and reports the kernel OpenBLAS says it ran (OPENBLAS_VERBOSE=2: "Core: ...").
The caller sets the winner's environment before it imports torch, and prints and records
the choice next to its figures.

    from peer_blas import best_openblas, apply_env, loaded_blas, refusal
    choice = best_openblas(threads=1)
    apply_env(choice)          # before `import torch`
    print(choice["line"])      # e.g. "peer BLAS: OpenBLAS core SkylakeX (OPENBLAS_CORETYPE=SkylakeX) ..."
    import torch; torch.ones(8, 8) @ torch.ones(8, 8)
    blas = loaded_blas(torch.__config__.show())
    if refusal(blas): sys.exit(refusal(blas))

    python3 bench/peer_blas.py [THREADS]   # the kernel table, and the BLAS torch loaded
"""
import json
import os
import re
import subprocess
import sys

PROBE = r"""
import json, sys, time
import torch
sys.path.insert(0, sys.argv[1])
from peer_blas import loaded_blas
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
print(json.dumps({"gflops": 2 * 512 * 784 * 512 * n / dt / 1e9, "rel_err": err,
                  "blas": loaded_blas(torch.__config__.show())}))
"""
HERE = os.path.dirname(os.path.abspath(__file__))

# A mapped file that is a BLAS: (pattern on its path, name, optimized). The first match
# names a file: Debian's OpenBLAS is also called libblas.so.3, in an openblas-* folder.
BLAS_KINDS = (
    (re.compile(r"libmkl_"), "MKL", True),
    (re.compile(r"openblas"), "OpenBLAS", True),
    (re.compile(r"libblis|/blis"), "BLIS", True),
    (re.compile(r"atlas"), "ATLAS", False),  # Debian's is a generic, untuned build
    (re.compile(r"/libc?blas\.so"), "reference BLAS (Netlib)", False),
)
# Files that cannot be the BLAS torch calls: ILP64 builds (other symbols or another soname)
# and the private copies wheels load with RTLD_LOCAL (numpy's, scipy's).
NOT_TORCHS = re.compile(r"(?:blas|lapack)64|/numpy\.libs/|/numpy/\.libs/|/scipy\.libs/|scipy_openblas")


def blas_from_maps(maps_text, torch_config=""):
    """Which BLAS a process runs, from its /proc/self/maps (read after a matmul) and, where
    no BLAS library is mapped (one linked into libtorch, as pip's MKL), torch's build
    configuration (torch.__config__.show()). {"name", "optimized", "files"}; optimized only
    when every BLAS mapped is one, so a reference BLAS beside an optimized one is reported."""
    found = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        path = parts[5].strip() if len(parts) == 6 else ""
        if not path.startswith("/") or ".so" not in path or NOT_TORCHS.search(path):
            continue
        for pattern, name, optimized in BLAS_KINDS:
            if pattern.search(path):
                found.setdefault(path, (name, optimized))
                break
    if found:
        names = sorted({n for n, _ in found.values()})
        return {"name": " + ".join(names), "optimized": all(o for _, o in found.values()),
                "files": sorted(found)}
    info = re.search(r"BLAS_INFO=(\w+)", torch_config or "")
    if info and info.group(1).lower() == "mkl":
        return {"name": "MKL (linked into libtorch)", "optimized": True, "files": []}
    said = f"torch's build says BLAS_INFO={info.group(1)}" if info else "torch's build names none"
    return {"name": f"unknown (no BLAS library is mapped; {said})", "optimized": False, "files": []}


def loaded_blas(torch_config=""):
    """blas_from_maps for this process: call it after a matmul, so a BLAS loaded lazily is in."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        maps = ""
    return blas_from_maps(maps, torch_config)


def describe(blas):
    """'OpenBLAS (/usr/lib/.../libblas.so.3)': what it is and the files it was read from."""
    return blas["name"] + (f" ({', '.join(blas['files'])})" if blas["files"] else "")


def refusal(blas, peer="PyTorch"):
    """None when the peer runs an optimized BLAS; else the line to print instead of a ratio."""
    if blas["optimized"]:
        return None
    return (f"no ratio: {peer} runs {describe(blas)}, not an optimized BLAS (OpenBLAS, MKL, BLIS), so a ratio "
            f"would measure its installation. On Debian: scripts/setup --bench (installs libopenblas0-pthread), "
            f"and if libblas.so.3 still points at the reference BLAS, "
            f"update-alternatives --config libblas.so.3-$(uname -m)-linux-gnu")


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
    its own choice), "gflops", "table": every candidate's result, "blas": the BLAS the probe
    loaded (loaded_blas), "line": a printable line}. When that BLAS is not OpenBLAS there
    is no kernel to choose: one probe, and the line names what was loaded."""
    table = []
    for ct in candidates():
        r = subprocess.run([python, "-c", PROBE, HERE], env=probe_env(ct, threads), capture_output=True, text=True,
                           timeout=120)
        core = re.search(r"Core:\s*(\S+)", r.stderr)
        row = {"coretype": ct, "core": core.group(1) if core else "?"}
        try:
            row.update(json.loads(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            row.update(gflops=0.0, rel_err=None, error=(r.stderr.strip().splitlines() or ["no output"])[-1])
        row["ok"] = row.get("rel_err") is not None and row["rel_err"] < 1e-4
        table.append(row)
        if ct is None and row.get("blas") and row["blas"]["name"] != "OpenBLAS":
            break  # not OpenBLAS: there is no kernel to choose
    good = [t for t in table if t["ok"] and t["gflops"] > 0]
    blas = table[0].get("blas")
    if blas and blas["name"] != "OpenBLAS":
        rate = f"; 512x784x512 sgemm {table[0]['gflops']:.1f} GFLOP/s" if table[0]["ok"] else ""
        return {"env": {}, "core": None, "coretype": None, "gflops": table[0].get("gflops", 0.0), "table": table,
                "blas": blas, "line": f"peer BLAS: {describe(blas)}{rate}"}
    if not good:
        return {"env": {}, "core": "?", "coretype": None, "gflops": 0.0, "table": table, "blas": blas,
                "line": "peer BLAS: no kernel passed the probe; the peer runs as the environment has it"}
    best = max(good, key=lambda t: t["gflops"])
    env = {"OPENBLAS_CORETYPE": best["coretype"]} if best["coretype"] else {}
    tried = ", ".join(f"{t['coretype'] or 'auto'}={t['core']} {t['gflops']:.1f}" for t in table)
    asked = f"OPENBLAS_CORETYPE={best['coretype']}" if best["coretype"] else "OpenBLAS's own choice"
    return {"env": env, "core": best["core"], "coretype": best["coretype"], "gflops": best["gflops"], "table": table,
            "blas": best.get("blas"),
            "line": f"peer BLAS: OpenBLAS core {best['core']} ({asked}); 512x784x512 sgemm GFLOP/s by kernel: {tried}"}


def apply_env(choice):
    """Sets the chosen kernel for this process and its children (before torch is imported)."""
    os.environ.pop("OPENBLAS_CORETYPE", None)
    os.environ.pop("OPENBLAS_L2_SIZE", None)
    os.environ.update(choice["env"])


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


if __name__ == "__main__":
    c = best_openblas(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(c["line"])
    if c.get("blas") and refusal(c["blas"]):
        print(refusal(c["blas"]))
