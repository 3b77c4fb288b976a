"""One job across three test hosts (label multihost): `ringfence coord` on host 0, one
`ringfence run -n 2 --nnodes 3` launcher per host, train_mlp on synthetic data
(tests/multihost/jobs.py).

  1. Failure-free: every launcher ends DONE, all six workers end with one state digest,
     and the gradients really crossed the network (bytes counted on each host's link).
  2. A worker on host 1 killed in the middle of an all-reduce: DONE, one restart, and the
     final state bitwise equal to the failure-free run.

Exit 77 (skipped) with the reason where network namespaces cannot be made.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import jobs  # noqa: E402
import netlab  # noqa: E402
from rf_testlib import check, failures  # noqa: E402

STEPS = 40
SYNTHETIC = ["--synthetic", "2048"]


def main():
    why = netlab.unavailable_reason()
    if why:
        print(f"SKIPPED: no network namespaces: {why}")
        return 77
    if len(sys.argv) != 2:
        sys.exit("usage: job_test.py BUILD_BIN_DIR")
    bindir = os.path.abspath(sys.argv[1])
    tmp = tempfile.mkdtemp(prefix="rf-multihost-")

    clean = jobs.run_job(bindir, tmp, "clean", steps=STEPS, worker_args=SYNTHETIC, deadline_s=90)
    check(clean.codes == [0, 0, 0], f"failure-free: launchers exit 0 (got {clean.codes})")
    check(all("job DONE" in clean.text(i) for i in range(3)), "failure-free: every launcher says job DONE")
    check(sorted(clean.digests) == list(range(6)), f"failure-free: six final states (got slots {sorted(clean.digests)})")
    check(len(set(clean.digests.values())) == 1, f"failure-free: one digest on every slot (got {clean.digests})")
    # Each host's two workers exchange every step's gradients (about 2.7 MB of MLP gradients)
    # with the other hosts through the ring: tens of megabytes each way over 40 steps. The
    # control plane alone moves well under one.
    print(f"failure-free: bytes over each host's link (rx, tx): {clean.link_bytes}")
    for i, (rx, tx) in enumerate(clean.link_bytes):
        check(rx > 20e6 and tx > 20e6, f"failure-free: host {i}'s link carried the gradients (rx {rx}, tx {tx} bytes)")

    killed = jobs.run_job(bindir, tmp, "kill", steps=STEPS, worker_args=SYNTHETIC, deadline_s=90,
                          launcher_args={1: ["--inject", "kill:rank=3:step=20:phase=allreduce"]})
    check(killed.codes == [0, 0, 0], f"worker killed: launchers exit 0 (got {killed.codes})")
    check(all("job DONE" in killed.text(i) for i in range(3)), "worker killed: every launcher says job DONE")
    check(re.search(r"job DONE .* 1 restart", killed.text(1)) is not None, "worker killed: host 1 restarted it once")
    jobs.check_cost(killed, "worker killed", restarts=1, faulty=(2, 3))  # rank 3: a worker of host 1
    check(not killed.exactly_once_problems(), f"worker killed: exactly once: {killed.exactly_once_problems()[:3]}")
    want = set(clean.digests.values())
    check(len(killed.digests) == 6 and set(killed.digests.values()) == want,
          f"worker killed: every slot ends bitwise equal to the failure-free run {want}; got {killed.digests}")

    if failures:
        for job in (clean, killed):
            job.dump()
        print(f"job_test: {len(failures)} check(s) failed; files in {tmp}")
        return 1
    subprocess.run(["rm", "-rf", tmp])
    print("job_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
