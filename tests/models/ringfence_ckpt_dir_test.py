#!/usr/bin/env python3
"""A fresh `ringfence run` never overwrites another run's checkpoints.

    ringfence_ckpt_dir_test.py RINGFENCE TRAIN_MLP

1. train_mlp alone writes checkpoints of steps 4 and 9 into D (another run's work).
2. `ringfence run -n 2 -- train_mlp ... --ckpt-dir D` without --resume: the job fails,
   the error names D and says to pass --resume or choose another directory, no worker
   trained a step, and every file in D has the same bytes (none replaced, none pruned).
3. The same job with --resume continues from step 9 to the end (exit 0): the rule stops
   only a fresh start.
4. A fresh job into an empty directory whose rank 0 is killed after its first checkpoints:
   the replacement finds this job's checkpoints in D and the job still ends DONE (a
   replacement pulls its state from a peer; its plan is no fresh start).
Every run has a deadline; on expiry the launcher's process group is SIGKILLed (its workers
die with it by PDEATHSIG) and the test fails.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import check, digests  # noqa: E402

DEADLINE_S = 60


def run(cmd, log):
    return rf_testlib.run(cmd, log, DEADLINE_S)


def main():
    ringfence, train_mlp = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="rf_ckptdir_")
    quick = ["--synthetic", "512", "--batch", "64", "--epochs", "3", "--max-steps", "10", "--log-interval", "0"]
    try:
        d = os.path.join(tmp, "other_run")
        rc, out = run([train_mlp, *quick, "--ckpt-dir", d, "--ckpt-every", "5"], f"{tmp}/alone.txt")
        check(rc == 0, f"preparing D: train_mlp exit {rc}: {out[-500:]}")
        before = digests(d)
        check("ckpt-000000004.safetensors" in before and "ckpt-000000009.safetensors" in before,
              f"preparing D: files {sorted(before)}")

        job = [ringfence, "run", "-n", "2", "--quiet", "--min-world-timeout", "10s", "--"]
        rc, out = run([*job, train_mlp, *quick, "--seed", "7", "--ckpt-dir", d, "--ckpt-every", "5"],
                      f"{tmp}/fresh.txt")
        check(rc is not None and rc != 0, f"fresh job into D: launcher exit {rc}, expected a failure")
        check(re.search(rf"--ckpt-dir {re.escape(d)} already holds checkpoints \(newest "
                        rf"{re.escape(d)}/ckpt-000000009\.safetensors\).*pass --resume .* or choose another "
                        "directory", out) is not None,
              f"fresh job into D: no error naming D and --resume in: {out[-1500:]}")
        check("== train_mlp slot" not in out, f"fresh job into D: a worker trained: {out[-1500:]}")
        check(digests(d) == before, f"fresh job into D changed its files: {before} -> {digests(d)}")

        rc, out = run([*job, train_mlp, *quick, "--max-steps", "14", "--ckpt-dir", d, "--resume"],
                      f"{tmp}/resume.txt")
        check(rc == 0, f"--resume job: launcher exit {rc}: {out[-1500:]}")
        check(re.search(r"resumed from \S+ckpt-000000009\.safetensors \(step 9\)", out) is not None,
              f"--resume job: did not resume from step 9: {out[-1500:]}")
        check(len(re.findall(r"^== train_mlp slot \d+ incarnation 0: step 13,", out, re.M)) == 2,
              f"--resume job: not both workers at step 13: {out[-1500:]}")

        e = os.path.join(tmp, "own_run")
        rc, out = run([*job[:-1], "--inject", "kill:rank=0:step=7", "--", train_mlp, *quick, "--ckpt-dir", e,
                       "--ckpt-every", "2"], f"{tmp}/replace.txt")
        check(rc == 0, f"fresh job with rank 0 killed at step 7: launcher exit {rc}: {out[-1500:]}")
        check(re.search(r"^== train_mlp slot 0 incarnation 1: step 9,", out, re.M) is not None,
              f"fresh job with rank 0 killed: no replacement of slot 0 finished: {out[-1500:]}")
        check("ckpt-000000009.safetensors" in digests(e), f"replacement's job: files {sorted(digests(e))}")
    finally:
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures("a fresh job refuses D with checkpoints; --resume and a replacement go on")


if __name__ == "__main__":
    main()
