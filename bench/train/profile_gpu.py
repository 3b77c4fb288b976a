#!/usr/bin/env python3
"""Per-kernel profile of one training step on a GPU, ringfence and PyTorch side by side:
each kernel's time and DRAM bytes (Nsight Compute), summed per kernel name.

    python3 bench/train/profile_gpu.py [--bin build/bin] [--model cnn] [--batch 1024]
        [--device cuda:0] [--ncu ncu] [--label before|after] [--json FILE] [--keep DIR] [--dry-run]

Each side runs under `ncu --profile-from-start off` and brackets exactly one step with
cudaProfilerStart/Stop after its warm-up: ringfence's `train_bench --profile --steps 1`,
PyTorch's eager step with cudnn.benchmark (autotuned during the warm-up; a captured graph
replays the same kernels) in this script's --torch-step mode. The metrics, per kernel:
gpu__time_duration.sum (ns), dram__bytes_read.sum and dram__bytes_write.sum (bytes),
exported as a report and read back with `ncu --import --csv --page raw --print-units base`.
Under Nsight Compute every kernel is replayed and serialized: the times are each kernel's
own, not the step's wall time (compare_torch_gpu.py measures that).

Prints, per side, the kernels by time (calls, µs, MB read + written) and the totals; writes
the JSON (section "GPU profile", bench/report.py) with --json. Exit 77 with the reason when
there is no ncu or it refuses the device (e.g. a gVisor sandbox: no performance counters):
gpu-check counts that step as skipped, never passed.

--dry-run (no GPU, no ncu): prints both ncu command lines and checks the CSV reader on a
sample in ncu's raw-page layout; exit 0 when the sums come out as computed by hand.
"""
import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"]
# ncu's messages when it cannot read the device's counters: the step is skipped, not failed.
REFUSALS = ("ERR_NVGPUCTRPERM", "not supported on this", "No kernels were profiled", "unsupported", "Unsupported")


def ncu_profile_cmd(ncu, report, app):
    return [ncu, "--profile-from-start", "off", "--target-processes", "all", "--metrics", ",".join(METRICS),
            "--export", report, "--force-overwrite", *app]


def ncu_import_cmd(ncu, report):
    return [ncu, "--import", report, "--csv", "--page", "raw", "--print-units", "base"]


def number(text):
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def read_raw_csv(text):
    """ncu's raw page as CSV: a header row (with "Kernel Name" and the metrics), a units row,
    then one row per kernel launch. Returns {kernel name: {calls, ns, read, write}}."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        raise ValueError("no 'Kernel Name' header in ncu's CSV")
    header = rows[start]
    name_col = header.index("Kernel Name")
    cols = {m: header.index(m) for m in METRICS if m in header}
    missing = [m for m in METRICS if m not in cols]
    if missing:
        raise ValueError(f"ncu's CSV lacks {missing}")
    kernels = {}
    for r in rows[start + 1:]:
        if len(r) <= max(cols.values()):
            continue
        unit = r[cols["gpu__time_duration.sum"]].strip()
        if unit and unit.isalpha():  # the units row
            if unit != "nsecond" or r[cols["dram__bytes_read.sum"]].strip() != "byte":
                raise ValueError(f"units {unit!r}, {r[cols['dram__bytes_read.sum']]!r}: import with --print-units base")
            continue
        if not r[name_col].strip():
            continue
        k = kernels.setdefault(r[name_col], {"calls": 0, "ns": 0.0, "read": 0.0, "write": 0.0})
        k["calls"] += 1
        k["ns"] += number(r[cols["gpu__time_duration.sum"]])
        k["read"] += number(r[cols["dram__bytes_read.sum"]])
        k["write"] += number(r[cols["dram__bytes_write.sum"]])
    return kernels


def totals(kernels):
    return {"calls": sum(k["calls"] for k in kernels.values()),
            "us": sum(k["ns"] for k in kernels.values()) / 1e3,
            "dram_mb": sum(k["read"] + k["write"] for k in kernels.values()) / 1e6}


def table(side, kernels, top=15):
    t = totals(kernels)
    print(f"\n{side}: {len(kernels)} kernels, {t['calls']} launches, {t['us']:.0f} µs, "
          f"{t['dram_mb']:.0f} MB DRAM per step")
    print(f"  {'kernel':60} {'calls':>5} {'µs':>9} {'MB':>9}")
    for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["ns"])[:top]:
        print(f"  {name[:60]:60} {k['calls']:5d} {k['ns'] / 1e3:9.1f} {(k['read'] + k['write']) / 1e6:9.1f}")


def torch_step_main(args):
    """Under ncu: warm up PyTorch's eager step, then bracket one step for the profiler."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare_torch_gpu import torch_step
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    step = torch_step(torch, args.device, args.model, args.batch, "eager")
    for _ in range(10):
        step()
    torch.cuda.synchronize(args.device)
    torch.cuda.profiler.start()
    step()
    torch.cuda.synchronize(args.device)
    torch.cuda.profiler.stop()
    return 0


def profile(ncu, app, work, side):
    report = os.path.join(work, f"{side}.ncu-rep")
    p = subprocess.run(ncu_profile_cmd(ncu, report, app), capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    with open(os.path.join(work, f"{side}.log"), "w") as f:
        f.write(out)
    if any(s in out for s in REFUSALS) or (p.returncode != 0 and not os.path.exists(report)):
        return None, out
    if p.returncode != 0:
        sys.exit(f"profile_gpu: {side}: ncu exited {p.returncode}:\n{out[-3000:]}")
    q = subprocess.run(ncu_import_cmd(ncu, report), capture_output=True, text=True, timeout=300)
    if q.returncode != 0:
        sys.exit(f"profile_gpu: {side}: ncu --import exited {q.returncode}:\n{q.stderr[-2000:]}")
    return read_raw_csv(q.stdout), out


SAMPLE = '''"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"
"","","","","","","","","","","","byte","byte","nsecond"
"0","11","train_bench","h","im2col_kernel","1","13","(256, 1, 1)","(528, 1, 1)","0","9.0","1,000,000","321,000,000","120,000"
"1","11","train_bench","h","sgemm_128x64","1","13","(128, 1, 1)","(96, 1, 1)","0","9.0","330,000,000","25,000,000","250,500"
"2","11","train_bench","h","im2col_kernel","1","13","(256, 1, 1)","(528, 1, 1)","0","9.0","2,000,000","321,000,000","119,500"
'''


def dry_run(args):
    app = [os.path.join(args.bin, "train_bench"), "--model", args.model, "--batch", str(args.batch), "--steps", "1",
           "--warmup", "5", "--device", args.device, "--profile"]
    print("dry run: nothing profiled; the commands:")
    print("  ringfence:", " ".join(ncu_profile_cmd(args.ncu, "WORK/ringfence.ncu-rep", app)))
    print("  pytorch:  ", " ".join(ncu_profile_cmd(args.ncu, "WORK/pytorch.ncu-rep", torch_app(args))))
    print("  read back:", " ".join(ncu_import_cmd(args.ncu, "WORK/SIDE.ncu-rep")))
    k = read_raw_csv(SAMPLE)
    want = {"im2col_kernel": {"calls": 2, "ns": 239500.0, "read": 3e6, "write": 642e6},
            "sgemm_128x64": {"calls": 1, "ns": 250500.0, "read": 330e6, "write": 25e6}}
    t = totals(k)
    ok = k == want and t == {"calls": 3, "us": 490.0, "dram_mb": 1000.0}
    table("sample", k)
    print(f"\nthe CSV reader on the sample: {'as computed by hand' if ok else 'WRONG: ' + repr(k)}")
    try:
        read_raw_csv(SAMPLE.replace('"nsecond"', '"usecond"'))
        print("the CSV reader took a time not in nanoseconds: WRONG")
        ok = False
    except ValueError as e:
        print(f"a time not in nanoseconds is refused: {e}")
    return 0 if ok else 1


def gpu_name():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=30)
        return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else "GPU not named"
    except (OSError, subprocess.TimeoutExpired):
        return "GPU not named"


def torch_app(args):
    return [args.python, os.path.abspath(__file__), "--torch-step", "--model", args.model, "--batch", str(args.batch),
            "--device", args.device]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--model", default="cnn", choices=["mlp", "cnn"])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--python", default=sys.executable, help="a python with torch, for the PyTorch side")
    ap.add_argument("--label", default="", help="before|after: a row label in the JSON")
    ap.add_argument("--json", default="")
    ap.add_argument("--keep", default="", help="keep the ncu reports and logs in this directory")
    ap.add_argument("--torch-step", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.torch_step:
        return torch_step_main(args)
    if args.dry_run:
        return dry_run(args)
    ncu = shutil.which(args.ncu) or next((p for p in (args.ncu, "/usr/local/cuda/bin/ncu") if os.path.exists(p)), None)
    if not ncu:
        print(f"SKIPPED: no Nsight Compute ({args.ncu}) on this machine")
        return 77
    work = args.keep or tempfile.mkdtemp(prefix="rf_profile_")
    os.makedirs(work, exist_ok=True)
    app = [os.path.join(args.bin, "train_bench"), "--model", args.model, "--batch", str(args.batch), "--steps", "1",
           "--warmup", "5", "--device", args.device, "--profile"]
    sides = {}
    for side, cmd in (("ringfence", app), ("pytorch", torch_app(args))):
        kernels, out = profile(ncu, cmd, work, side)
        if kernels is None:
            print(f"SKIPPED: ncu cannot profile here ({side}): {out.strip()[-600:]}")
            return 77
        sides[side] = kernels
        table(side, kernels)
    rows = [{"label": args.label, "side": side, "kernels": len(k), **totals(k)} for side, k in sides.items()]
    rf, pt = totals(sides["ringfence"]), totals(sides["pytorch"])
    print(f"\nringfence / pytorch: kernel time {rf['us'] / pt['us']:.2f}x, DRAM {rf['dram_mb'] / pt['dram_mb']:.2f}x")
    if args.json:  # bench/report.py's layout; per_kernel is kept for a closer look
        with open(args.json, "w") as f:
            json.dump({"section": "GPU", "order": 80,
                       "title": f"Per-kernel profile: one {args.model.upper()} step at batch {args.batch}, "
                                "kernel time and DRAM bytes (Nsight Compute)",
                       "command": " ".join(["python3", "bench/train/profile_gpu.py", "--model", args.model,
                                            "--batch", str(args.batch), "--label", args.label]),
                       "commit": os.environ.get("RF_COMMIT", "not recorded"), "date": time.strftime("%Y-%m-%d"),
                       "machine": gpu_name(), "rows": rows, "per_kernel": sides}, f, indent=1)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
