"""netlab: K test hosts on one machine, as network namespaces, and the faults a network
makes (a cut link, a one-way partition, loss and delay).

    with Lab(3) as lab:              # hosts h0, h1, h2 with addresses lab.addr(i)
        p = lab.spawn(0, ["build/bin/ringfence", "run", ...], "/tmp/h0.log")
        lab.partition(0, 1)          # h0's packets to h1 are dropped (h1 -> h0 still flows)
        lab.heal(0, 1)
        lab.link_down(2); lab.link_up(2)
        lab.netem(1, delay_ms=50, loss_pct=1); lab.netem_clear(1)

The layout: one "switch" namespace holds a bridge; each host namespace has one veth, eth0,
whose peer is a port of that bridge, and an address of 10.213.0.0/24 that exists only
inside these namespaces (each lab has its own switch, so two labs never see each other).
Every name carries the lab's owner pid (rf<pid>-sw, rf<pid>-h<i>), so a lab left behind
by a killed test is recognised and removed by the next one.

Cleanup is total and runs however the test ends (close(), the context manager, atexit,
SIGTERM): every process spawned into a host is killed by its process group and reaped by
PID, then every process still inside a lab namespace (ip netns pids) is killed, then the
namespaces are deleted, which deletes their links, bridge, qdiscs and iptables rules.
"""
import atexit
import os
import signal
import socket
import subprocess
import sys
import time

SUBNET = "10.213.0"
PREFIX = "rf"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def unavailable_reason():
    """None when this process can make network namespaces, else why not (for a skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "tc", "iptables"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            return f"'{tool}' is not installed (scripts/setup installs iproute2 and iptables)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


_netem_reason = []


def netem_unavailable_reason():
    """None when the kernel has the netem qdisc, else why not (asked once, on a scratch
    namespace's loopback)."""
    if not _netem_reason:
        probe = f"{PREFIX}{os.getpid()}-netem"
        _ip("netns", "add", probe, check=False)
        r = subprocess.run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                           capture_output=True, text=True)
        _ip("netns", "del", probe, check=False)
        _netem_reason.append(None if r.returncode == 0 else
                             f"this kernel has no netem qdisc (tc: {r.stderr.strip()}); shape() and loss() "
                             "stand in for it")
    return _netem_reason[0]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale():
    """Deletes lab namespaces whose owner process is gone (a test killed before cleanup)."""
    r = _ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX) or "-" not in name:
            continue
        owner = name[len(PREFIX):name.index("-")]
        if owner.isdigit() and not _pid_alive(int(owner)):
            _kill_netns_pids(name)
            _ip("netns", "del", name, check=False)


def _kill_netns_pids(ns):
    r = _ip("netns", "pids", ns, check=False)
    pids = [int(p) for p in r.stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


class Lab:
    def __init__(self, hosts, tag=None):
        if hosts < 1 or hosts > 200:
            raise ValueError(f"Lab: {hosts} hosts; between 1 and 200")
        sweep_stale()
        self.n = hosts
        self.tag = f"{PREFIX}{os.getpid()}{'' if tag is None else tag}"
        self.switch = f"{self.tag}-sw"
        self.names = [f"{self.tag}-h{i}" for i in range(hosts)]
        self.procs = []
        self.closed = False
        self._made = []
        atexit.register(self.close)
        self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ---- layout ----
    def _build(self):
        self._add_ns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        _ip("-n", self.switch, "link", "set", "lo", "up")
        for i, ns in enumerate(self.names):
            self._add_ns(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            # The veth is made inside the switch: no name is ever taken in the root namespace.
            _ip("-n", self.switch, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.switch, "link", "set", f"h{i}", "master", "br0")
            _ip("-n", self.switch, "link", "set", f"h{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def _add_ns(self, ns):
        _ip("netns", "add", ns)
        self._made.append(ns)

    def addr(self, i):
        return f"{SUBNET}.{10 + i}"

    def ns(self, i):
        return self.names[i]

    # ---- processes ----
    def spawn(self, host, argv, log, env=None):
        """Starts argv inside host `host`, its output to `log`, in a new session (so its whole
        process group can be killed). Returns the Popen; the lab reaps it on close."""
        out = open(log, "w")
        p = subprocess.Popen(["ip", "netns", "exec", self.names[host], *argv], stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True, env=env)
        out.close()
        self.procs.append(p)
        return p

    def run(self, host, argv, timeout):
        """Runs argv inside host `host` to completion within `timeout` seconds."""
        return subprocess.run(["ip", "netns", "exec", self.names[host], *argv], capture_output=True, text=True,
                              timeout=timeout)

    def kill(self, p, sig=signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    # ---- faults ----
    def link_down(self, host):
        """The host's cable is pulled: its bridge port goes down (both directions)."""
        _ip("-n", self.switch, "link", "set", f"h{host}", "down")

    def link_up(self, host):
        _ip("-n", self.switch, "link", "set", f"h{host}", "up")

    def _drop_rule(self, a, b, action):
        """iptables in host a: -A adds, -D removes the rule dropping what a sends to b."""
        subprocess.run(["ip", "netns", "exec", self.names[a], "iptables", "-w", action, "OUTPUT", "-d", self.addr(b),
                        "-j", "DROP"], check=True)

    def partition(self, a, b):
        """One direction: every packet host a sends to host b is dropped (b -> a still flows)."""
        self._drop_rule(a, b, "-A")

    def heal(self, a, b):
        self._drop_rule(a, b, "-D")

    def netem(self, host, delay_ms=0, jitter_ms=0, loss_pct=0.0):
        """Delay (and jitter) and loss on everything the host sends. Raises RuntimeError naming
        the reason where the kernel has no netem (netem_unavailable_reason())."""
        why = netem_unavailable_reason()
        if why:
            raise RuntimeError(f"netem: {why}")
        args = ["tc", "-n", self.names[host], "qdisc", "replace", "dev", "eth0", "root", "netem"]
        if delay_ms or jitter_ms:
            args += ["delay", f"{delay_ms}ms"] + ([f"{jitter_ms}ms"] if jitter_ms else [])
        if loss_pct:
            args += ["loss", f"{loss_pct}%"]
        subprocess.run(args, check=True)

    def shape(self, host, rate_kbit):
        """A slow link without netem: a token bucket (tbf) limits what the host sends."""
        subprocess.run(["tc", "-n", self.names[host], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate",
                        f"{rate_kbit}kbit", "burst", "16kb", "latency", "2s"], check=True)

    def loss(self, host, pct):
        """Random loss without netem: iptables drops pct % of what the host sends."""
        subprocess.run(["ip", "netns", "exec", self.names[host], "iptables", "-w", "-A", "OUTPUT", "-o", "eth0", "-m",
                        "statistic", "--mode", "random", "--probability", str(pct / 100.0), "-j", "DROP"],
                       check=True)

    def loss_clear(self, host):
        subprocess.run(["ip", "netns", "exec", self.names[host], "iptables", "-w", "-F", "OUTPUT"], check=True)

    def netem_clear(self, host):
        subprocess.run(["tc", "-n", self.names[host], "qdisc", "del", "dev", "eth0", "root"], check=False,
                       capture_output=True)

    # ---- cleanup ----
    def _on_term(self, signum, frame):
        self.close()
        sys.exit(128 + signum)

    def close(self):
        if self.closed:
            return
        self.closed = True
        for p in self.procs:
            self.kill(p)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # Anything that left the process groups (a daemonised child) is still in a namespace.
        for ns in reversed(self._made):
            _kill_netns_pids(ns)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        try:
            signal.signal(signal.SIGTERM, self._old_term)
        except (ValueError, TypeError):
            pass

    def leftovers(self):
        """Namespaces of this lab that still exist (empty after close)."""
        r = _ip("netns", "list", check=False)
        mine = set(self._made)
        return [line.split()[0] for line in r.stdout.splitlines() if line.split() and line.split()[0] in mine]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# ---- probes run inside a host (python3 netlab.py <probe> ...) ----
def _serve_tcp(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(port)))
    s.listen(64)
    print("listening", flush=True)
    while True:
        c, _ = s.accept()
        while c.recv(1 << 16):  # a sink: reads until the client closes
            pass
        c.close()


def _connect(addr, port, timeout):
    t = time.monotonic()
    try:
        socket.create_connection((addr, int(port)), timeout=float(timeout)).close()
    except OSError as e:
        print(f"fail {e}")
        return 1
    print(f"ok {time.monotonic() - t:.6f}")
    return 0


def _send_bytes(addr, port, nbytes, timeout):
    t = time.monotonic()
    try:
        c = socket.create_connection((addr, int(port)), timeout=float(timeout))
        c.sendall(b"x" * int(nbytes))
        c.shutdown(socket.SHUT_WR)
        c.recv(1)  # the server closes after reading everything
        c.close()
    except OSError as e:
        print(f"fail {e}")
        return 1
    print(f"ok {time.monotonic() - t:.6f}")
    return 0


def _udp_recv(port, timeout):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", int(port)))
    s.settimeout(float(timeout))
    print("bound", flush=True)
    try:
        data, peer = s.recvfrom(100)
        print(f"got {data.decode()} from {peer[0]}")
        return 0
    except socket.timeout:
        print("nothing")
        return 1


def _udp_send(addr, port, count):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(int(count)):
        s.sendto(b"hello", (addr, int(port)))
        time.sleep(0.01)
    return 0


if __name__ == "__main__":
    probes = {"serve-tcp": _serve_tcp, "connect": _connect, "udp-recv": _udp_recv, "udp-send": _udp_send,
              "send-bytes": _send_bytes}
    if len(sys.argv) < 2 or sys.argv[1] not in probes:
        sys.exit(f"usage: netlab.py {{{','.join(probes)}}} ARGS")
    sys.exit(probes[sys.argv[1]](*sys.argv[2:]) or 0)
