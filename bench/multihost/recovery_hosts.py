"""Recovery across hosts: 3 test hosts x 2 workers (network namespaces, tests/multihost/),
train_mlp on Fashion-MNIST, default settings. For each fault, TRIALS runs; the launcher's
summary gives each recovery's phases (detect, agree, connect, transfer, verify) and its
total, and the median of each is printed (and written as JSON).

  killed_worker  one worker SIGKILLed in the middle of an all-reduce; its launcher restarts it
  lost_host      host 2's launcher and workers SIGKILLed; spare slots on hosts 0 and 1 replace them
  partition      host 2's link pulled; its workers self-fence (D4) and the others shrink to W = 4

  python3 bench/multihost/recovery_hosts.py BUILD_BIN_DIR [--trials N] [--json OUT]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "multihost"))
import jobs  # noqa: E402
import netlab  # noqa: E402

PHASES = ["detect", "agree", "connect", "transfer", "verify"]
SUMMARY = re.compile(r"recovery 1: (\S+) of slot \d+ -> generation \d+ \(world (\d+), T \d+\), total ([\d.]+) ms; (.*)")


def first_recovery(job):
    m = SUMMARY.search(job.text(0))
    if not m:
        return None
    out = {"cause": m.group(1), "world": int(m.group(2)), "total": float(m.group(3))}
    for name, ms in re.findall(r"(\w+) ([\d.]+) ms", m.group(4)):
        out[name] = float(ms)
    return out


def at_step(job, step):
    jobs.wait_for(lambda: jobs.step_applied(job, step), f"step {step} applied", 60)  # the audit: exact to the step


def run(bindir, tmp, fault, trial):
    name = f"{fault}-{trial}"
    if fault == "killed_worker":
        return jobs.run_job(bindir, tmp, name, steps=120,
                            launcher_args={1: ["--inject", "kill:rank=3:step=60:phase=allreduce"]})
    if fault == "lost_host":
        def kill_host(lab, job, procs):
            at_step(job, 50)
            lab.kill(procs[2])
        return jobs.run_job(bindir, tmp, name, steps=120, launcher_args={0: ["--spares", "1"], 1: ["--spares", "1"]},
                            during=kill_host)

    def cut(lab, job, procs):
        at_step(job, 50)
        lab.link_down(2)
    return jobs.run_job(bindir, tmp, name, steps=120, coord_args=["--min-world", "4"], during=cut)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bindir")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--json", default="bench/out/multihost_recovery.json")
    a = ap.parse_args()
    why = netlab.unavailable_reason()
    if why:
        sys.exit(f"recovery_hosts: cannot make test hosts: {why}")
    bindir = os.path.abspath(a.bindir)
    tmp = tempfile.mkdtemp(prefix="rf-bench-hosts-")
    results = {}
    for fault in ("killed_worker", "lost_host", "partition"):
        rows = []
        for t in range(a.trials):
            r = first_recovery(run(bindir, tmp, fault, t))
            if r is None:
                print(f"{fault} trial {t}: no recovery in the launcher's summary (files in {tmp})")
                continue
            rows.append(r)
        results[fault] = rows
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"recovery across 3 hosts x 2 workers ({a.trials} trials each; medians, ms); {cpu}, {os.cpu_count()} cores, "
          f"commit {commit}")
    print("| fault | cause | world after | " + " | ".join(PHASES) + " | total |")
    print("|---" * (len(PHASES) + 4) + "|")
    for fault, rows in results.items():
        if not rows:
            continue
        med = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in PHASES + ["total"]}
        print(f"| {fault} | {rows[0]['cause']} | {rows[0]['world']} | " +
              " | ".join(f"{med[k]:.0f}" for k in PHASES) + f" | {med['total']:.0f} |")
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"command": "python3 " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                   "trials": a.trials, "cpu": cpu, "cores": os.cpu_count(), "commit": commit,
                   "machine": platform.node(), "results": results}, f, indent=1)
    subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
