"""The control plane of several hosts for the multi-host tests: a 3-member etcd cluster with
one member per test host, and `ringfence coord --etcd` replicas on other hosts that elect a
leader through it (docs/control-plane.md).

    etcd = EtcdOnHosts(lab, [0, 1, 2], tmp)     # members in hosts 0-2, healthy on return
    ctl = Replicas(etcd, [3, 4])                # c0 on host 3, c1 on host 4
    job = jobs.run_job(..., lab=lab, control=ctl)
    ctl.leader(job)                             # index of the replica that leads now

Every process goes through lab.spawn, so the lab kills and reaps it whatever happens; the
data directories live in the test's temporary directory.
"""
import json
import os
import re
import subprocess
import time

CLIENT_PORT, PEER_PORT, COORD_PORT = 2379, 2380, 29412


class EtcdOnHosts:
    def __init__(self, lab, hosts, tmp, deadline_s=30):
        self.lab, self.hosts, self.tmp = lab, list(hosts), tmp
        self.procs = {}
        cluster = ",".join(f"m{h}=http://{lab.addr(h)}:{PEER_PORT}" for h in self.hosts)
        for h in self.hosts:
            client, peer = f"http://{lab.addr(h)}:{CLIENT_PORT}", f"http://{lab.addr(h)}:{PEER_PORT}"
            self.procs[h] = lab.spawn(h, ["etcd", "--name", f"m{h}", "--data-dir", os.path.join(tmp, f"etcd-m{h}"),
                                          "--listen-client-urls", client, "--advertise-client-urls", client,
                                          "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                                          "--initial-cluster", cluster, "--initial-cluster-state", "new",
                                          "--log-level", "error"], os.path.join(tmp, f"etcd-m{h}.log"))
        end = time.monotonic() + deadline_s
        for h in self.hosts:
            while not self.healthy(h):
                if time.monotonic() > end:
                    raise RuntimeError(f"etcd member on host {h} not healthy within {deadline_s} s: "
                                       f"{open(os.path.join(tmp, f'etcd-m{h}.log')).read()[-2000:]}")
                time.sleep(0.05)  # a poll interval; health decides

    def endpoints(self, hosts=None):
        return ",".join(f"http://{self.lab.addr(h)}:{CLIENT_PORT}" for h in (hosts or self.hosts))

    def ctl(self, host, *args, timeout=10):
        """etcdctl (v3) inside `host`, against every member."""
        env = dict(os.environ, ETCDCTL_API="3")
        return subprocess.run(["ip", "netns", "exec", self.lab.ns(host), "etcdctl", "--endpoints",
                               self.endpoints(), "--dial-timeout", "2s", *args], capture_output=True, text=True,
                              timeout=timeout, env=env)

    def healthy(self, h):
        r = subprocess.run(["ip", "netns", "exec", self.lab.ns(h), "etcdctl", "--endpoints",
                            f"http://{self.lab.addr(h)}:{CLIENT_PORT}", "--dial-timeout", "1s", "endpoint", "health"],
                           capture_output=True, text=True, timeout=10, env=dict(os.environ, ETCDCTL_API="3"))
        return r.returncode == 0

    def raft_leader(self):
        """The host whose member leads the etcd cluster's raft group (None if unknown)."""
        r = self.ctl(self.hosts[0], "endpoint", "status", "-w", "json")
        for h, st in zip(self.hosts, json.loads(r.stdout or "[]")):
            if st.get("Status", {}).get("header", {}).get("member_id") == st.get("Status", {}).get("leader"):
                return next(x for x in self.hosts if f"{self.lab.addr(x)}:" in st["Endpoint"])
        return None

    def kill(self, h):
        self.lab.kill(self.procs[h])
        self.procs[h].wait()


class Replicas:
    """`ringfence coord --etcd` on each of `hosts` (replica k is c<k>), for jobs.run_job."""

    def __init__(self, etcd, hosts, job_name="mh", extra=()):
        self.etcd, self.hosts, self.job_name, self.extra = etcd, list(hosts), job_name, list(extra)
        self.procs, self.logs, self.events = [], [], []

    def start(self, lab, job, world, token, tmp):
        with open(token, "w") as f:
            f.write(os.urandom(16).hex() + "\n")
        for k, h in enumerate(self.hosts):
            self.logs.append(os.path.join(tmp, f"{job.name}-c{k}.log"))
            self.events.append(os.path.join(tmp, f"{job.name}-c{k}-events.jsonl"))
            self.procs.append(lab.spawn(h, [f"{job.bindir}/ringfence", "coord", "-n", str(world), "--etcd",
                                            self.etcd.endpoints(), "--job", self.job_name, "--id", f"c{k}",
                                            "--host", lab.addr(h), "--port", str(COORD_PORT), "--token-file", token,
                                            "--event-log", self.events[-1], *self.extra], self.logs[-1]))
        job.replicas = self
        return ["--etcd", self.etcd.endpoints(), "--job", self.job_name, "--token-file", token]

    def text(self, k):
        try:
            with open(self.logs[k]) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def leader(self):
        """The replica that leads now: the last one whose log says it took the lead."""
        best, at = None, -1
        for k in range(len(self.hosts)):
            for ev in self.event_lines(k):
                if ev.get("event") == "leading" and ev["ts_us"] > at:
                    best, at = k, ev["ts_us"]
        return best

    def event_lines(self, k):
        out = []
        try:
            with open(self.events[k]) as f:
                text = f.read()
        except (FileNotFoundError, IndexError):
            return out
        for line in text[:text.rfind("\n") + 1].splitlines():
            if line.startswith("{"):
                out.append(json.loads(line))
        return out

    def events_of(self, k, name):
        return [e for e in self.event_lines(k) if e.get("event") == name]

    def wait_exit(self, deadline_s):
        codes = []
        end = time.monotonic() + deadline_s
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(0.1, end - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes


def leader_changes(text):
    """The launcher's summary line naming every leader, as [(id, from_generation)]."""
    m = re.search(r"coordinator leaders: (.*)", text)
    return re.findall(r"(\S+) from generation (\d+)", m.group(1)) if m else []
