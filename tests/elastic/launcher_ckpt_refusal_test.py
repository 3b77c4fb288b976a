#!/usr/bin/env python3
"""A configuration every worker refuses ends the job once, with its cause, and no restarts.

    launcher_ckpt_refusal_test.py RINGFENCE TRAIN_MLP

train_mlp alone writes checkpoints into D (another run's work). Then
`ringfence run -n 2 -- train_mlp --ckpt-dir D` without --resume: every worker refuses D at
the fresh-start plan (ddp/recovery.cpp, Recovery::plan) and reports it to the coordinator as fatal, which
STOPs the job with that error. The launcher's last line names the refusal (not "exited
before it registered", not "fewer than the minimum world size"), exit status 1, nobody is
restarted (a restart would refuse again), and D's files keep their bytes. The run has a deadline; on expiry the launcher's process group is
SIGKILLed (its workers die with it by PDEATHSIG) and the test fails.
"""
import json
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
    tmp = tempfile.mkdtemp(prefix="rf_launcher_refusal_")
    quick = ["--synthetic", "512", "--batch", "64", "--epochs", "3", "--max-steps", "10", "--log-interval", "0"]
    try:
        d = os.path.join(tmp, "other_run")
        rc, out = run([train_mlp, *quick, "--ckpt-dir", d, "--ckpt-every", "5"], f"{tmp}/alone.txt")
        check(rc == 0, f"preparing D: train_mlp exit {rc}: {out[-500:]}")
        before = digests(d)
        check("ckpt-000000009.safetensors" in before, f"preparing D: files {sorted(before)}")

        summary = os.path.join(tmp, "summary.json")
        rc, out = run([ringfence, "run", "-n", "2", "--quiet", "--min-world-timeout", "10s", "--summary", summary,
                       "--", train_mlp, *quick, "--seed", "7", "--ckpt-dir", d, "--ckpt-every", "5"],
                      f"{tmp}/job.txt")
        check(rc == 1, f"launcher exit {rc}, expected 1: {out[-1500:]}")
        errors = re.findall(r"^ringfence: error: .*$", out, re.M)
        check(len(errors) == 1, f"launcher error lines {errors}, expected one")
        refusal = (rf"slot \d \(incarnation 0\) cannot run: --ckpt-dir {re.escape(d)} already holds checkpoints "
                   rf"\(newest {re.escape(d)}/ckpt-000000009\.safetensors\).*pass --resume")
        check(len(errors) == 1 and re.search(refusal, errors[0]) is not None,
              f"the launcher's error does not name the ckpt-dir refusal: {errors}")
        check("before it registered" not in out and "minimum world size" not in out,
              f"a wrong cause in the output: {out[-1500:]}")
        check("incarnation 1" not in out, f"a worker was restarted: {out[-1500:]}")
        try:
            with open(summary) as f:
                s = json.load(f)
        except (OSError, ValueError) as e:
            s = {}
            check(False, f"no summary: {e}")
        check(s.get("phase") == "STOPPED", f"summary phase {s.get('phase')}")
        check(s.get("restarts") == 0, f"summary restarts {s.get('restarts')}")
        check(all(len(w["spawns"]) == 1 for w in s.get("workers", [])), f"summary spawns {s.get('workers')}")
        check(digests(d) == before, f"the job changed D's files: {before} -> {digests(d)}")
    finally:
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures("the ckpt-dir refusal ends the job once, named by the launcher, no restarts, D unchanged")


if __name__ == "__main__":
    main()
