#!/usr/bin/env python3
"""A worker that cannot have its --device stops the whole `ringfence run` job with its
reason, before any step, and nobody is restarted.

    ringfence_device_test.py RINGFENCE TRAIN_MLP

Without a GPU (no CUDA in the build, or none on the machine: `train_mlp --device cuda
--max-steps 0` exits 2): `ringfence run -n 2 -- train_mlp --device cuda` ends STOPPED,
exit 1, its last line `ringfence: error: slot S (incarnation 0) cannot run: --device cuda:
no CUDA device to use (...)`.
With one: `-n 2 ... --device cuda:0 --backend nccl` (two ranks on one GPU) ends the same
way with NCCL's refusal. Every run has a deadline (rf_testlib.run).
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import check  # noqa: E402

DEADLINE_S = 60


def main():
    ringfence, train_mlp = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="rf_device_")
    quick = ["--synthetic", "256", "--batch", "32", "--max-steps", "4", "--log-interval", "0"]
    try:
        rc, out = rf_testlib.run([train_mlp, "--device", "cuda", *quick[:4], "--max-steps", "0"],
                                 f"{tmp}/probe.txt", DEADLINE_S)
        check(rc in (0, 2), f"probe: train_mlp --device cuda exited {rc}: {out[-800:]}")
        if rc == 2:
            flags, reason = ["--device", "cuda"], r"--device cuda: no CUDA device to use \(.+\)"
        else:
            flags = ["--device", "cuda:0", "--backend", "nccl"]
            reason = (r"--backend nccl: NCCL refuses two ranks on one GPU: 2 ranks on this host share 1 GPU\(s\); "
                      r"use --backend ucx or fewer ranks per host")
        rc, out = rf_testlib.run([ringfence, "run", "-n", "2", "--", train_mlp, *flags, *quick],
                                 f"{tmp}/job.txt", DEADLINE_S)
        check(rc == 1, f"{' '.join(flags)}: launcher exit {rc}, want 1: {out[-1500:]}")
        check(re.search(rf"^ringfence: error: slot \d \(incarnation 0\) cannot run: {reason}$", out, re.M),
              f"{' '.join(flags)}: no final error with the reason in: {out[-1500:]}")
        check("job STOPPED" in out, f"{' '.join(flags)}: the job was not STOPPED: {out[-1500:]}")
        check("incarnation 1" not in out and "== train_mlp slot" not in out,
              f"{' '.join(flags)}: a worker was restarted or trained: {out[-1500:]}")
    finally:
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures("a worker's --device refusal stops the job with its reason")


if __name__ == "__main__":
    main()
