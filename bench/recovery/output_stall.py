#!/usr/bin/env python3
"""output_stall — what an output nobody reads costs a job, at default settings.

    build/bin/ringfence run -n 4 -- build/bin/train_mlp --synthetic 8192 --log-interval 1 ...

with stdout and stderr in one pipe of the kernel's default size (64 KiB) that this script
leaves unread, as a paused terminal, `| less` or a stalled ssh link does:

  pause   once the pipe is full, slot 1's worker is SIGSTOPped by pid (a debugger, a
          container freeze) for PAUSE seconds, the pipe unread all that time; then SIGCONT
          and the pipe is read again.
  unread  no fault: once the pipe is full it stays unread for UNREAD seconds.

For each trial: recoveries, restarts, evictions (slots), whether the job restarted from
step 0, and the recovery's total (failure first visible -> RUNNING again).

    output_stall.py [--build build] [--trials 3] [--pause 3] [--unread 15]

Exit status 1 if a trial cost more than it should: a pause more than one eviction and one
restart, or no fault any recovery at all.
"""
import argparse
import os
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import output_stall_test as t  # noqa: E402  (the CI test's job: pipe, audit log, event log)
from rf_testlib import load_json  # noqa: E402


def trial(build, kind, seconds, work):
    t.PIPE_BYTES = 65536
    t.STEPS = 6000
    t.DEADLINE_S = 300  # 6000 steps: about 25 s on a quiet 2-core machine
    job = t.Job(f"{build}/bin/ringfence", f"{build}/bin/train_mlp", work)
    stopped = None
    try:
        if job.wait_full():
            if kind == "pause":
                stopped = t.worker_pid(job.proc.pid, 1)
                if stopped:
                    os.kill(stopped, signal.SIGSTOP)
            time.sleep(seconds)
            if stopped:
                t.resume(stopped)
        job.read_to_end()
    finally:
        job.close()
    s = load_json(f"{work}/summary.json") or {}
    recs = s.get("recoveries", [])
    evicted = sorted({e["worker"]["slot"] for e in job.event("evict") + job.event("fail")})
    return {"done": s.get("phase") == "DONE", "recoveries": len(recs), "restarts": s.get("restarts"),
            "evicted": evicted, "from_zero": "started again at step 0" in job.output,
            "total_ms": [round(r.get("total_ms") or 0) for r in recs]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--pause", type=float, default=3.0)
    ap.add_argument("--unread", type=float, default=15.0)
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# {cpu}, {os.cpu_count()} cores; W = 4, train_mlp --log-interval 1, a 64 KiB output pipe")
    print("| output pipe | trial | done | recoveries | restarts | evicted | from step 0 | recovery |")
    print("|---|---|---|---|---|---|---|---|")
    bad = 0
    tmp = tempfile.mkdtemp(prefix="rf_output_stall_bench_")
    for kind, seconds, label in (("pause", a.pause, f"unread during a {a.pause:g} s SIGSTOP of slot 1"),
                                 ("unread", a.unread, f"unread {a.unread:g} s, no fault")):
        for i in range(a.trials):
            work = f"{tmp}/{kind}{i}"
            os.makedirs(work)
            r = trial(a.build, kind, seconds, work)
            want = (1, 1, [1]) if kind == "pause" else (0, 0, [])
            ok = r["done"] and not r["from_zero"] and (r["recoveries"], r["restarts"], r["evicted"]) == want
            bad += not ok
            total = ", ".join(f"{ms / 1000:.2f} s" for ms in r["total_ms"]) or "—"
            print(f"| {label} | {i + 1} | {r['done']} | {r['recoveries']} | {r['restarts']} | {r['evicted']} | "
                  f"{r['from_zero']} | {total} |{'' if ok else ' **more than it should**'}", flush=True)
    print(f"# work folders in {tmp}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
