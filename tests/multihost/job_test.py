"""One job across three test hosts (label multihost): `ringfence coord` on host 0, one
`ringfence run -n 2 --nnodes 3` launcher per host, train_mlp on synthetic data.

  1. Failure-free: every launcher ends DONE, all six workers end with one state digest,
     and the gradients really crossed the network (bytes counted on each host's link).
  2. A worker on host 1 killed in the middle of an all-reduce: DONE, one restart, and the
     final state bitwise equal to the failure-free run.

UCX recognises "the same machine" by the kernel's boot id, which the test hosts share, so it
would carry their bytes through shared memory; the launchers run with UCX_TLS=self,tcp, as
separate machines would talk. ringfence's own shared-memory paths key on the host identity
(comm/host_identity.h) and stay within a host by themselves.

Exit 77 (skipped) with the reason where network namespaces cannot be made.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import netlab  # noqa: E402
from rf_testlib import check, failures  # noqa: E402

PORT = 29411
JOB_DEADLINE_S = 90
STEPS = 40


def wait_for(cond, what, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)  # a poll interval; the condition decides
    check(False, f"{what} within {deadline_s} s")
    return False


def link_bytes(lab, i):
    """(rx, tx) bytes of host i's eth0."""
    out = lab.run(i, ["cat", "/sys/class/net/eth0/statistics/rx_bytes", "/sys/class/net/eth0/statistics/tx_bytes"],
                  10).stdout.split()
    return int(out[0]), int(out[1])


def run_job(bindir, tmp, name, inject=None):
    """Runs the job once in a fresh lab; returns (launcher exit codes, logs, {slot: digest}, bytes per host)."""
    token = os.path.join(tmp, f"{name}.token")
    with netlab.Lab(3) as lab:
        coord_log = os.path.join(tmp, f"{name}-coord.log")
        lab.spawn(0, [f"{bindir}/ringfence", "coord", "-n", "6", "--host", lab.addr(0), "--port", str(PORT),
                      "--token-file", token, "--event-log", os.path.join(tmp, f"{name}-events.jsonl")], coord_log)
        if not wait_for(lambda: "listening" in open(coord_log).read(), f"{name}: coordinator listening", 20):
            return None, [open(coord_log).read()], {}, []
        env = dict(os.environ, UCX_TLS="self,tcp")
        procs, logs = [], []
        for i in range(3):
            log = os.path.join(tmp, f"{name}-h{i}.log")
            argv = [f"{bindir}/ringfence", "run", "-n", "2", "--coord", f"{lab.addr(0)}:{PORT}", "--token-file", token,
                    "--nnodes", "3", "--node-rank", str(i)]
            if inject and inject[0] == i:
                argv += ["--inject", inject[1]]
            argv += ["--", f"{bindir}/train_mlp", "--synthetic", "2048", "--epochs", "3", "--max-steps", str(STEPS),
                     "--log-interval", "10"]
            procs.append(lab.spawn(i, argv, log, env=env))
            logs.append(log)
        codes = []
        end = time.monotonic() + JOB_DEADLINE_S
        for p in procs:
            try:
                codes.append(p.wait(timeout=max(0.1, end - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        moved = [link_bytes(lab, i) for i in range(3)]
    texts = [open(log).read() for log in logs]
    digests = {}
    for t in texts:
        for slot, digest in re.findall(r"== train_mlp slot (\d+) incarnation \d+: step \d+, .*state ([0-9a-f]{32})", t):
            digests[int(slot)] = digest
    return codes, texts, digests, moved


def main():
    why = netlab.unavailable_reason()
    if why:
        print(f"SKIPPED: no network namespaces: {why}")
        return 77
    if len(sys.argv) != 2:
        sys.exit("usage: job_test.py BUILD_BIN_DIR")
    bindir = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rf-multihost-")

    codes, texts, clean, moved = run_job(bindir, tmp, "clean")
    check(codes == [0, 0, 0], f"failure-free: launchers exit 0 (got {codes})")
    check(all("job DONE" in t for t in texts), "failure-free: every launcher says job DONE")
    check(sorted(clean) == list(range(6)), f"failure-free: six workers reported a final state (got slots {sorted(clean)})")
    check(len(set(clean.values())) == 1, f"failure-free: one digest on every slot (got {clean})")
    # Each host's two workers exchange every step's gradients (about 1.4 MB of MLP parameters)
    # with the other hosts through the ring: tens of megabytes each way over 40 steps. The
    # control plane alone moves well under one.
    for i, (rx, tx) in enumerate(moved):
        check(rx > 20e6 and tx > 20e6, f"failure-free: host {i}'s link carried the gradients (rx {rx}, tx {tx} bytes)")

    codes, texts, killed, _ = run_job(bindir, tmp, "kill", inject=(1, "kill:rank=3:step=20:phase=allreduce"))
    check(codes == [0, 0, 0], f"worker killed: launchers exit 0 (got {codes})")
    check(all("job DONE" in t for t in texts), "worker killed: every launcher says job DONE")
    check(re.search(r"job DONE .* 1 restart", texts[1]) is not None, "worker killed: host 1's launcher restarted it once")
    want = next(iter(clean.values()), None)
    check(sorted(killed) == list(range(6)) and set(killed.values()) == {want},
          f"worker killed: every slot ends bitwise equal to the failure-free run ({want}); got {killed}")

    if failures:
        print(f"job_test: {len(failures)} check(s) failed; logs in {tmp}")
        for name in ("clean", "kill"):
            for i in range(3):
                path = os.path.join(tmp, f"{name}-h{i}.log")
                if os.path.exists(path):
                    print(f"---- {path} (tail)\n" + "".join(open(path).readlines()[-15:]))
        return 1
    subprocess.run(["rm", "-rf", tmp])
    print("job_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
