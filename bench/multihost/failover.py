"""Coordinator fail-over across test hosts: the cases of tests/multihost/failover_test.py (3
hosts x 2 workers, one etcd member on each, two `ringfence coord --etcd` replicas on hosts 3
and 4, default settings: leader lease 3 s, worker lease 1 s), TRIALS runs each. Per case:

  failover_ms  from the fault to the standby's `leading` event (its event log)
  resume_ms    from the fault to the next generation RUNNING under the new leader

Both on the same clock (the test hosts share this machine's). Medians printed and written as
JSON (bench/out/failover.json, rendered into bench/RESULTS.md by bench/report.py).

  python3 bench/multihost/failover.py BUILD_BIN_DIR [--trials N] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "multihost"))
import failover_test  # noqa: E402
import netlab  # noqa: E402
from rf_testlib import failures  # noqa: E402

CASES = ["leader_killed_training", "leader_killed_recovery", "coord_host_partitioned"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bindir")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json", default="bench/out/failover.json")
    a = ap.parse_args()
    why = netlab.unavailable_reason()
    if why:
        sys.exit(f"failover: cannot make test hosts: {why}")
    bindir = os.path.abspath(a.bindir)
    rows = []
    for case in CASES:
        got = []
        for t in range(a.trials):
            tmp = tempfile.mkdtemp(prefix=f"rf-bench-failover-{case}-")
            before = len(failures)
            _, fig = failover_test.run_case(bindir, case, tmp)
            if len(failures) > before or not fig or fig.get("resume_ms") is None:
                print(f"{case} trial {t}: the case failed its checks (files in {tmp}); not counted")
                continue
            got.append(fig)
            subprocess.run(["rm", "-rf", tmp])
        if got:
            rows.append({"case": case, "trials": len(got),
                         "failover_ms": round(statistics.median(g["failover_ms"] for g in got)),
                         "resume_ms": round(statistics.median(g["resume_ms"] for g in got))})
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"coordinator fail-over, 3 hosts x 2 workers + 2 replicas, leader lease {failover_test.LEADER_LEASE_S:.0f} s "
          f"(medians of {a.trials}, ms); {cpu}, {os.cpu_count()} cores, commit {commit}")
    print("| case | failover_ms | resume_ms |\n|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['failover_ms']} | {r['resume_ms']} |")
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"command": "python3 " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                   "commit": commit, "machine": f"{cpu}, {os.cpu_count()} cores", "trials": a.trials,
                   "leader_lease_s": failover_test.LEADER_LEASE_S, "rows": rows}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
