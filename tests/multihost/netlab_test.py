"""The multi-host harness itself (label multihost): three hosts reach each other over the
bridge; a one-way partition drops exactly one direction and heals; a pulled link cuts a
host off and comes back; netem delays what a host sends; and closing the lab (also after
a failure inside it) leaves no namespace and no process behind.

Exit 77 (ctest: skipped) with the reason when this machine cannot make network namespaces.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import netlab  # noqa: E402
from rf_testlib import check, failures  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = [sys.executable, os.path.join(HERE, "netlab.py")]
PORT = 7311
DEADLINE_S = 20  # for each condition waited on


def connect(lab, src, dst, timeout=0.5):
    """(reached, seconds) for a TCP connect from host src to host dst's listener."""
    r = lab.run(src, PROBE + ["connect", lab.addr(dst), str(PORT), str(timeout)], timeout=timeout + 10)
    words = r.stdout.split()
    return (bool(words) and words[0] == "ok"), (float(words[1]) if words[:1] == ["ok"] else None)


def wait_until(cond, what):
    end = time.monotonic() + DEADLINE_S
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)  # a poll interval, not a synchronisation: the condition decides
    check(False, f"{what} within {DEADLINE_S} s")
    return False


def udp_delivered(lab, src, dst, tmp):
    """Whether a datagram host src sends reaches host dst (the receiver waits up to 1 s)."""
    log = os.path.join(tmp, f"udp-{src}-{dst}.log")
    recv = lab.spawn(dst, PROBE + ["udp-recv", str(PORT + 1), "1.0"], log)
    wait_until(lambda: os.path.exists(log) and "bound" in open(log).read(), f"udp receiver on h{dst} bound")
    lab.run(src, PROBE + ["udp-send", lab.addr(dst), str(PORT + 1), "5"], timeout=10)
    recv.wait(timeout=10)
    return "got hello" in open(log).read()


def main():
    why = netlab.unavailable_reason()
    if why:
        print(f"SKIPPED: no network namespaces: {why}")
        return 77
    tmp = subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip()
    lab = netlab.Lab(3)
    names = list(lab.names) + [lab.switch]
    pids = []
    try:
        for i in range(3):
            p = lab.spawn(i, PROBE + ["serve-tcp", str(PORT)], os.path.join(tmp, f"serve-{i}.log"))
            pids.append(p.pid)
        for a in range(3):
            for b in range(3):
                if a != b:
                    wait_until(lambda a=a, b=b: connect(lab, a, b)[0], f"h{a} reaches h{b}")

        # One-way partition: h0's packets to h1 are dropped; h1's to h0 still arrive.
        lab.partition(0, 1)
        check(not udp_delivered(lab, 0, 1, tmp), "partition(0, 1): a datagram h0 -> h1 is dropped")
        check(udp_delivered(lab, 1, 0, tmp), "partition(0, 1): a datagram h1 -> h0 still arrives")
        check(connect(lab, 0, 2)[0], "partition(0, 1) leaves h0 -> h2 alone")
        lab.heal(0, 1)
        wait_until(lambda: connect(lab, 0, 1)[0], "after heal(0, 1), h0 reaches h1")

        # A pulled cable: h2 is cut off both ways, then comes back.
        lab.link_down(2)
        check(not connect(lab, 0, 2)[0], "link_down(2): h0 cannot reach h2")
        check(not connect(lab, 2, 1)[0], "link_down(2): h2 cannot reach h1")
        check(connect(lab, 0, 1)[0], "link_down(2) leaves h0 -> h1 alone")
        lab.link_up(2)
        wait_until(lambda: connect(lab, 0, 2)[0], "after link_up(2), h0 reaches h2")

        # Delay on h1's egress: a connect to h1 waits for its SYN-ACK, so takes >= the delay.
        netem_why = netlab.netem_unavailable_reason()
        if netem_why:
            print(f"netem case: skipped: {netem_why}")
        else:
            lab.netem(1, delay_ms=150)
            ok, secs = connect(lab, 0, 1, timeout=3)
            check(ok and secs >= 0.15, f"netem delay 150 ms on h1: connect h0 -> h1 took {secs} s (>= 0.15 expected)")
            lab.netem_clear(1)
            ok, secs = connect(lab, 0, 1, timeout=3)
            check(ok and secs < 0.1, f"netem cleared: connect h0 -> h1 took {secs} s (< 0.1 expected)")

        # A slow link (tbf at 800 kbit/s on h0's egress): 200 KB take >= 1.5 s; unshaped, far less.
        def send(nbytes):
            r = lab.run(0, PROBE + ["send-bytes", lab.addr(1), str(PORT), str(nbytes), "20"], timeout=30)
            w = r.stdout.split()
            return float(w[1]) if w[:1] == ["ok"] else None
        fast = send(200_000)
        lab.shape(0, 800)
        slow = send(200_000)
        lab.netem_clear(0)
        check(fast is not None and fast < 0.5, f"unshaped: 200 KB h0 -> h1 took {fast} s (< 0.5 expected)")
        check(slow is not None and slow >= 1.5, f"shape(0, 800 kbit): 200 KB h0 -> h1 took {slow} s (>= 1.5 expected)")

        # Random loss: 100 % drops everything h2 sends; cleared, h2 reaches h0 again.
        lab.loss(2, 100)
        check(not connect(lab, 2, 0)[0], "loss(2, 100 %): h2 cannot reach h0")
        lab.loss_clear(2)
        wait_until(lambda: connect(lab, 2, 0)[0], "after loss_clear(2), h2 reaches h0")

        # A failure inside a lab still cleans up: a second lab raises after spawning.
        inner_names = []
        try:
            with netlab.Lab(2, tag="x") as inner:
                inner_names = list(inner.names) + [inner.switch]
                inner.spawn(0, PROBE + ["serve-tcp", str(PORT)], os.path.join(tmp, "inner.log"))
                raise RuntimeError("a test failing inside the lab")
        except RuntimeError:
            pass
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        check(not any(n in listed.split() for n in inner_names), f"a lab that raised left namespaces: {listed}")
    finally:
        lab.close()

    check(lab.leftovers() == [], f"namespaces left after close: {lab.leftovers()}")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    check(not any(n in listed for n in names), "no lab namespace is listed after close")
    for pid in pids:
        check(not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
              f"process {pid} spawned into the lab is gone")
    subprocess.run(["rm", "-rf", tmp])
    if failures:
        print(f"netlab_test: {len(failures)} check(s) failed")
        return 1
    print("netlab_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
