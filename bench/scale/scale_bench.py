#!/usr/bin/env python3
"""The control plane against N (docs/scale.md): for each N, a real `ringfence coord` (alone,
or the leader of two replicas on a 3-member etcd this script starts) and build/bin/rf_loadgen
simulating N members (+2 spares) on one event loop at the real cadence. Per N: formation;
the coordinator's steady-state CPU (% of one core) and memory; every heartbeat's round trip
(p50/p99: how late the coordinator reads and answers it, so how late it can judge it); a
member's death (its connections close, D1) and a silent member (its lease, D2), each
filled by a spare: from the death to every member holding the revoke, from there to the
next generation RUNNING; with etcd, its writes per generation and the commit latency.
N doubles until the last one given or until something breaks (said in the table).

  python3 bench/scale/scale_bench.py [--build build] [--n 64,128,...] [--steady-s 5]
                                     [--control embedded,etcd] [--label after]

Writes bench/out/scale_<control>_<label>.json (then: python3 bench/report.py,
/usr/bin/python3 bench/plots.py). The load generator shares this machine's cores with the
coordinator: its own CPU is in the table too.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PORT, ETCD_PORT = 29555, 23790


def wait_for(cond, what, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)  # a poll interval; the condition decides
    raise RuntimeError(f"{what} within {deadline_s} s")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def events(path):
    return [json.loads(line) for line in read(path).splitlines() if line.startswith("{")]


class Etcd:
    """Three etcd members on 127.0.0.1 (client ports ETCD_PORT+1..3), data in tmp."""

    def __init__(self, tmp):
        self.procs = []
        names = [f"m{i}" for i in range(3)]
        cluster = ",".join(f"{n}=http://127.0.0.1:{ETCD_PORT + 11 + i}" for i, n in enumerate(names))
        for i, n in enumerate(names):
            client, peer = f"http://127.0.0.1:{ETCD_PORT + 1 + i}", f"http://127.0.0.1:{ETCD_PORT + 11 + i}"
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", n, "--data-dir", os.path.join(tmp, n), "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", cluster, "--initial-cluster-state", "new", "--log-level", "error",
                 "--listen-metrics-urls", f"http://127.0.0.1:{ETCD_PORT + 21 + i}"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"{n}.log"), "w")))
        self.endpoints = ",".join(f"http://127.0.0.1:{ETCD_PORT + 1 + i}" for i in range(3))
        env = dict(os.environ, ETCDCTL_API="3")
        wait_for(lambda: subprocess.run(["etcdctl", "--endpoints", self.endpoints, "endpoint", "health"],
                                        capture_output=True, env=env).returncode == 0, "etcd healthy", 30)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()


def one(bindir, n, control, steady_s, tmp):
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write(os.urandom(16).hex() + "\n")
    ev = os.path.join(tmp, "events.jsonl")
    procs, etcd = [], None
    try:
        if control == "etcd":
            etcd = Etcd(tmp)
            for k in range(2):
                log = os.path.join(tmp, f"c{k}.log")
                procs.append(subprocess.Popen(
                    [f"{bindir}/ringfence", "coord", "-n", str(n), "--etcd", etcd.endpoints, "--job", "scale",
                     "--token-file", token, "--host", "127.0.0.1", "--port", str(PORT + k), "--id", f"c{k}",
                     "--event-log", ev if k == 0 else os.path.join(tmp, "events-c1.jsonl")],
                    stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True))
                if k == 0:
                    wait_for(lambda: "leading" in read(log), "c0 leads", 30)
        else:
            log = os.path.join(tmp, "coord.log")
            procs.append(subprocess.Popen(
                [f"{bindir}/ringfence", "coord", "-n", str(n), "--host", "127.0.0.1", "--port", str(PORT),
                 "--token-file", token, "--event-log", ev], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                start_new_session=True))
            wait_for(lambda: "listening" in read(log), "the coordinator listens", 30)
        r = subprocess.run([f"{bindir}/rf_loadgen", "--coord", f"127.0.0.1:{PORT}", "--token-file", token,
                            "--members", str(n), "--coord-pid", str(procs[0].pid), "--steady-s", str(steady_s)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            # What the coordinator saw meanwhile: members it evicted, and why.
            causes = {}
            for e in events(ev):
                if e.get("event") in ("evict", "fail"):
                    causes[e.get("cause")] = causes.get(e.get("cause"), 0) + 1
            seen = ", ".join(f"{k} x{v}" for k, v in sorted(causes.items())) or "no eviction"
            return {"N": n, "broke": f"{(r.stderr.strip().splitlines() or ['?'])[-1]} (coordinator: {seen})"}
        out = json.loads(r.stdout)
        evs = events(ev)
        row = {"N": n, "formation_ms": out["formation_ms"], **{k: out["steady"][k] for k in (
            "coord_cpu_pct", "coord_rss_mb", "heartbeats_per_s", "rtt_p50_ms", "rtt_p99_ms", "rtt_max_ms",
            "loadgen_cpu_pct")}}
        for f in out["failures"]:
            name = "d1" if f["kind"] == "connection_closed" else "d2"
            # When the coordinator judged it, from its event log (the same wall clock).
            judged = [e["ts_us"] for e in evs if e.get("event") in ("fail", "evict") and e.get("cause") == f["kind"]
                      and e.get("worker", {}).get("slot") == f["victim"]]
            late = (judged[0] - f["t0_wall_us"]) / 1e3 - f.get("lease_ms", 0) if judged else None
            row.update({f"{name}_judged_late_ms": late, f"{name}_all_revoke_ms": f["all_revoke_ms"],
                        f"{name}_revoke_to_running_ms": f["revoke_to_running_ms"]})
        if control == "etcd":
            # The commits of the two failures' generations (2 and 3): writes and bytes per
            # generation, and how long the loop waited for each.
            cs = [e for e in evs if e.get("event") == "commit" and e.get("g") in (2, 3)]
            ms = sorted(e["ms"] for e in cs)
            row.update({"etcd_commits_per_gen": len(cs) / 2, "etcd_kb_per_gen": sum(e["bytes"] for e in cs) / 2048,
                        "commit_p50_ms": ms[len(ms) // 2] if ms else None, "commit_max_ms": ms[-1] if ms else None})
        return row
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        if etcd:
            etcd.close()


def cpu_model():
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--n", default="64,128,256,512,1024,2048,4096,8192")
    ap.add_argument("--steady-s", type=float, default=5)
    ap.add_argument("--control", default="embedded,etcd")
    ap.add_argument("--label", default="after", help="before or after the design change (the file's name)")
    a = ap.parse_args()
    bindir = os.path.join(a.build, "bin")
    for prog in ("ringfence", "rf_loadgen"):
        if not os.path.exists(os.path.join(bindir, prog)):
            sys.exit(f"scale_bench: {bindir}/{prog} is missing: build first (cmake --build {a.build})")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    for control in a.control.split(","):
        rows = []
        for n in [int(x) for x in a.n.split(",")]:
            tmp = tempfile.mkdtemp(prefix=f"rf-scale-{control}-{n}-")
            try:
                row = one(bindir, n, control, a.steady_s, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            print(json.dumps({"control": control, **row}), flush=True)
            rows.append(row)
            if "broke" in row:
                break
        doc = {"section": "Control plane at scale", "order": {"embedded": 1, "etcd": 2}[control] * 10 +
               (0 if a.label == "before" else 1),
               "title": f"Coordinator against N simulated members, {control}"
                        f"{' (3-member etcd, 2 replicas)' if control == 'etcd' else ''}, {a.label}",
               "command": f"python3 bench/scale/scale_bench.py --n {a.n} --steady-s {a.steady_s:g} --control {control}"
                          f" --label {a.label}",
               "commit": commit, "date": datetime.date.today().isoformat(),
               "machine": f"{cpu_model()}, {os.cpu_count()} cores", "rows": rows,
               "notes": "rtt: a heartbeat's round trip (how late the coordinator reads it); d1: a member's "
                        "connections close; d2: a member falls silent (judged late: past its lease); revoke: "
                        "every member holds it; running: the next generation RUNNING (a spare fills the hole)."}
        path = os.path.join(ROOT, "bench", "out", f"scale_{control}_{a.label}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
