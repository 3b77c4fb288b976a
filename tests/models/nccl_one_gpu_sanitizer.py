"""The sanitizer case of tests/models/nccl_one_gpu_test.py: compute-sanitizer's memcheck,
racecheck and synccheck on test_nccl_gpu and one train_cnn step, 0 errors; a
compute-sanitizer that is missing or refuses the device is a skip, never a pass.
"""
import os
import re
import shutil
import sys

from nccl_one_gpu_jobs import left, seconds_left, skip
from rf_testlib import check, failures, run


def find_sanitizer():
    path = shutil.which("compute-sanitizer")
    if path:
        return path
    for p in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if os.path.exists(p):
            return p
    return None


REFUSED = re.compile(r"Device not supported|not supported on this (platform|device)|Unable to (find|load|initialize)|"
                     r"Target application terminated before first instrumented API call|"
                     r"Error: .*(injection|driver|profiling)", re.I)


TOOLS = ("memcheck", "racecheck", "synccheck")


def sanitizer_targets(ctx):
    return [("test_nccl_gpu", [ctx.a.test_nccl_gpu]),
            ("train_cnn, one step", [ctx.a.train_cnn, "--device", "cuda", "--synthetic", "64", "--batch", "32",
                                     "--max-steps", "1", "--log-interval", "0"])]


def case_sanitizer(ctx):
    cs = find_sanitizer()
    if cs is None:
        skip("compute-sanitizer: not found (PATH, /usr/local/cuda/bin)")
    if not (ctx.a.test_nccl_gpu and ctx.a.train_cnn):
        sys.exit("sanitizer: needs --test-nccl-gpu and --train-cnn")
    _, help_text = run([cs, "--help"], f"{ctx.work}/sanitizer-help.txt", left(30))
    opts = ["--error-exitcode", "86", "--print-limit", "20"]
    if "--report-api-errors" in help_text:
        opts += ["--report-api-errors", "no"]  # NCCL and CUDA probe calls that may fail; we check every call
    exclude = ["--kernel-name-exclude", "kns=nccl"] if "--kernel-name-exclude" in help_text else []
    targets = sanitizer_targets(ctx)
    refused, rows, notes = [], [], []
    runs = [(tool, name, cmd) for tool in TOOLS for name, cmd in targets]
    for i, (tool, name, cmd) in enumerate(runs):
        extra = exclude if tool != "memcheck" else []
        log = f"{ctx.work}/{tool}-{name.split(',')[0]}.txt"
        share = max(10, int(seconds_left() / (len(runs) - i)))  # what is left, shared
        rc, out = run([cs, "--tool", tool, *opts, *extra, *cmd], log, left(share))
        if rc is None:
            check(False, f"sanitizer: {tool} on {name}: over its {share} s share of the budget:\n{out[-1500:]}")
            rows.append(f"{tool} {name}: over {share} s")
            continue
        m = re.search(r"ERROR SUMMARY: (\d+) error", out)
        if m is None:
            r = REFUSED.search(out)
            if r:
                refused.append(f"{tool} on {name}: {r.group(0)}")
                continue
            check(False, f"sanitizer: {tool} on {name}: exit {rc}, no ERROR SUMMARY:\n{out[-2000:]}")
            rows.append(f"{tool} {name}: no summary")
            continue
        errors = int(m.group(1))
        check(errors == 0, f"sanitizer: {tool} on {name}: {errors} error(s):\n{out[-3000:]}")
        rows.append(f"{tool} {name}: {errors} errors")
        if errors == 0 and rc != 0:
            # Its own status under the tool. test_nccl_gpu bounds how late a stalled or aborted
            # all-reduce fails (100 ms, 10 ms) for uninstrumented runs (gpu-tests checks them):
            # a doctest failure there is noted, not counted. Anything else is a failure.
            tests = re.search(r"\[doctest\] test cases: *(\d+) \| *(\d+) passed \| *(\d+) failed", out)
            if name == "test_nccl_gpu" and tests:
                notes.append(f"under {tool}, test_nccl_gpu's own checks: {tests.group(2)} of {tests.group(1)} "
                             f"cases passed (timing bounds are for uninstrumented runs)")
            else:
                check(False, f"sanitizer: {tool} on {name}: 0 errors but the program exited {rc}:\n{out[-2000:]}")
    note = " (racecheck and synccheck leave out NCCL's kernels, kns=nccl)" if exclude else ""
    if refused and not failures:
        skip(f"compute-sanitizer refuses this machine: {'; '.join(refused)}")
    for n in notes:
        print(f"NOTE: {n}")
    print(f"RESULT compute-sanitizer{note}: {'; '.join(rows)}{'; ' + '; '.join(notes) if notes else ''}")
