#!/usr/bin/env python3
"""Checkpoints on a real full disk: a small tmpfs.

    disk_full_tmpfs_test.py RINGFENCE TRAIN_MLP

One MLP checkpoint is 5.4 MB. On a 7 MiB tmpfs the first one fits and no second one can
be written next to it (retention never deletes the newest valid checkpoint before a newer
one is durable); on a 12 MiB tmpfs two fit, so each write makes room by removing the older.
  * train_mlp alone, 7 MiB: every periodic checkpoint after step 9 fails with ENOSPC as a
    warning naming step 9's file, training goes on to the end with the digest of the same
    run without checkpoints; the final one is staged (ckpt/staging.h) in a directory of
    the test's, then step 9's file goes and the final one is written in its place: exit
    0, the directory holds the final checkpoint only (resuming from it gives the same
    digest), nothing is left in the staging directory;
  * the same with staging on a 2 MiB tmpfs (too small): the final checkpoint cannot be
    written, the run exits 1 naming step 9's file, which is intact (resuming from it ends
    with the same digest), and nothing is left in either place;
  * ringfence run -n 2, 7 MiB, at the defaults (staging in /var/tmp): DONE (exit 0), no
    restart, the failed periodic checkpoints counted in the summary, the final digests
    equal to the run without checkpoints, the final checkpoint on disk, nothing left in
    /var/tmp;
  * ringfence run -n 2, 12 MiB: DONE (exit 0), no failed checkpoint, the last two on disk
    (the final one and the one before).
Skipped (exit 77) with the reason where a tmpfs cannot be mounted; unmounts what it
mounted. Every run has a deadline; on expiry its process group is SIGKILLed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import check, run  # noqa: E402

DEADLINE_S = 120
QUICK = ["--synthetic", "2048", "--batch", "64", "--epochs", "3", "--max-steps", "60", "--log-interval", "10"]
ALONE = re.compile(r"^== test accuracy .* state (x3:[0-9a-f]{32})$", re.M)
FINAL = re.compile(r"^== train_mlp slot (\d+) incarnation (\d+): step (-?\d+), .* state (x3:[0-9a-f]{32})$", re.M)


class Tmpfs:
    """A tmpfs of the given size at a fresh mount point; unmounted and removed by close()."""

    def __init__(self, size):
        self.dir = tempfile.mkdtemp(prefix="rf_tmpfs_")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", self.dir],
                           capture_output=True, text=True, timeout=30)
        self.mounted = r.returncode == 0
        self.why = (r.stderr or r.stdout).strip()

    def close(self):
        if self.mounted:
            if subprocess.run(["umount", self.dir], timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", self.dir], timeout=30)
            self.mounted = False
        os.rmdir(self.dir)


def ls(path):
    """The names in a directory, sorted; [] when it is missing."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def summary(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def main():
    ringfence, train_mlp = sys.argv[1], sys.argv[2]
    probe = Tmpfs("1m")
    if not probe.mounted:
        probe.close()
        print(f"SKIP: cannot mount a tmpfs here ({probe.why or 'mount failed'}); the storage-fault tests "
              "(ringfence_disk_test.py) inject the same errors without one")
        sys.exit(77)
    probe.close()
    tmp = tempfile.mkdtemp(prefix="rf_diskfull_")
    mounts = []
    try:
        rc, out = run([train_mlp, *QUICK], f"{tmp}/ref1.txt", DEADLINE_S)
        m = ALONE.search(out)
        check(rc == 0 and m, f"reference alone: exit {rc}: {out[-800:]}")
        ref1 = m[1] if m else None
        rc, out = run([ringfence, "run", "-n", "2", "--", train_mlp, *QUICK], f"{tmp}/ref2.txt", DEADLINE_S)
        finals = {int(m[1]): m[4] for m in FINAL.finditer(out)}
        check(rc == 0 and len(finals) == 2, f"reference W=2: exit {rc}: {out[-800:]}")
        ref2 = set(finals.values())

        small = Tmpfs("7m")
        mounts.append(small)
        stage = f"{tmp}/stage"
        os.mkdir(stage)
        d = f"{small.dir}/alone"
        rc, out = run([train_mlp, *QUICK, "--ckpt-dir", d, "--ckpt-every", "10", "--ckpt-staging", stage],
                      f"{tmp}/alone7.txt", DEADLINE_S)
        newest = f"{d}/ckpt-000000009.safetensors"
        final = f"{d}/ckpt-000000059.safetensors"
        check(rc == 0, f"alone, 7 MiB: exit {rc}, expected 0 (the final checkpoint staged, then in place): {out[-1500:]}")
        for s in (19, 29, 39, 49):
            check(f"ckpt: warning: step {s} not checkpointed: " in out, f"alone, 7 MiB: no warning for step {s}")
        check(re.search(r"ckpt: warning: step 19 not checkpointed: \S+: write failed: No space left on device; the "
                        rf"newest valid checkpoint is {re.escape(newest)} \(step 9\)", out),
              f"alone, 7 MiB: the warning does not name ENOSPC and {newest}: {out[-1500:]}")
        check(f"staged it as {stage}/ringfence-ckpt-" in out and f"ckpt: removed {newest} (step 59 is staged)" in out
              and f"ckpt: wrote {final}" in out, f"alone, 7 MiB: the final checkpoint was not staged: {out[-1500:]}")
        m = ALONE.search(out)
        check(m and m[1] == ref1, f"alone, 7 MiB: digest {m[1] if m else None}, without checkpoints {ref1}")
        check(ls(d) == ["ckpt-000000059.safetensors", "ckpt.lock"], f"alone, 7 MiB: {ls(d)}")
        check(ls(stage) == [], f"alone, 7 MiB: left in the staging directory: {ls(stage)}")
        rc, out = run([train_mlp, *QUICK, "--resume-from", final], f"{tmp}/resumed.txt", DEADLINE_S)
        m = ALONE.search(out)
        check(rc == 0 and m and m[1] == ref1, f"resumed from {final}: exit {rc}, digest {m[1] if m else None}")

        # Staging on a disk too small for it: the final checkpoint fails, nothing in the
        # directory is touched, and the run exits 1 naming step 9's file.
        shutil.rmtree(d, ignore_errors=True)
        tiny = Tmpfs("2m")
        mounts.append(tiny)
        rc, out = run([train_mlp, *QUICK, "--ckpt-dir", d, "--ckpt-every", "10", "--ckpt-staging", tiny.dir],
                      f"{tmp}/alone7_tiny.txt", DEADLINE_S)
        check(rc == 1, f"alone, 7 MiB, staging on 2 MiB: exit {rc}, expected 1 (the final state is not on disk): "
              f"{out[-1500:]}")
        check(re.search(rf"train_mlp: error: the final state \(step 59, state {ref1}\) is not in the checkpoint directory: the checkpoint "
                        r"of step 59 could not be written \(.*No space left on device; .*\(staging the final "
                        rf"checkpoint\) failed: No space left on device\); the newest valid checkpoint is "
                        rf"{re.escape(newest)}", out),
              f"alone, 7 MiB, staging on 2 MiB: no final error naming {newest} and the staging: {out[-1500:]}")
        check(ls(d) == ["ckpt-000000009.safetensors", "ckpt.lock"],
              f"alone, 7 MiB, staging on 2 MiB: {ls(d)}")
        check(ls(tiny.dir) == [], f"alone, 7 MiB, staging on 2 MiB: left there: {ls(tiny.dir)}")
        rc, out = run([train_mlp, *QUICK, "--resume-from", newest], f"{tmp}/resumed9.txt", DEADLINE_S)
        m = ALONE.search(out)
        check(rc == 0 and m and m[1] == ref1, f"resumed from {newest}: exit {rc}, digest {m[1] if m else None}")
        tiny.close()
        mounts.remove(tiny)

        # Under the launcher, at the defaults (staging in /var/tmp).
        shutil.rmtree(d, ignore_errors=True)  # the disk is the job's alone
        d = f"{small.dir}/job"
        var_tmp_before = set(os.listdir("/var/tmp"))
        job = [ringfence, "run", "-n", "2", "--summary", f"{tmp}/job7.json", "--"]
        rc, out = run([*job, train_mlp, *QUICK, "--ckpt-dir", d, "--ckpt-every", "10"], f"{tmp}/job7.txt", DEADLINE_S)
        s = summary(f"{tmp}/job7.json")
        check(rc == 0 and s.get("phase") == "DONE", f"W=2, 7 MiB: exit {rc}, expected DONE 0: {out[-1500:]}")
        check(s.get("restarts") == 0, f"W=2, 7 MiB: {s.get('restarts')} restart(s)")
        # (how many: the writer defers a periodic checkpoint while a write runs)
        check(s.get("checkpoints_failed", 0) >= 1, f"W=2, 7 MiB: checkpoints_failed {s.get('checkpoints_failed')}")
        check("No space left on device" in s.get("checkpoint_error", ""), f"W=2, 7 MiB: {s.get('checkpoint_error')!r}")
        check(re.search(r"ringfence: \d+ checkpoint\(s\) could not be written \(training went on\)", out),
              f"W=2, 7 MiB: the launcher's summary line does not count the failed checkpoints: {out[-1500:]}")
        check("staged it as /var/tmp/ringfence-ckpt-" in out, f"W=2, 7 MiB: not staged in /var/tmp: {out[-1500:]}")
        check({m[4] for m in FINAL.finditer(out)} == ref2, f"W=2, 7 MiB: digests differ from {ref2}")
        check(ls(d) == ["ckpt-000000059.safetensors", "ckpt.lock"], f"W=2, 7 MiB: {ls(d)}")
        left = set(os.listdir("/var/tmp")) - var_tmp_before
        check(not left, f"W=2, 7 MiB: left in /var/tmp: {left}")
        check(s.get("wall_s", 99) < 30, f"W=2, 7 MiB: {s.get('wall_s')} s (a min-world timeout?)")
        small.close()
        mounts.remove(small)

        big = Tmpfs("12m")
        mounts.append(big)
        d = f"{big.dir}/job"
        job = [ringfence, "run", "-n", "2", "--summary", f"{tmp}/job12.json", "--"]
        rc, out = run([*job, train_mlp, *QUICK, "--ckpt-dir", d, "--ckpt-every", "10"], f"{tmp}/job12.txt", DEADLINE_S)
        s = summary(f"{tmp}/job12.json")
        check(rc == 0 and s.get("phase") == "DONE", f"W=2, 12 MiB: exit {rc}: {out[-1500:]}")
        check(s.get("checkpoints_failed") == 0, f"W=2, 12 MiB: checkpoints_failed {s.get('checkpoints_failed')}")
        check("to make room" in out, f"W=2, 12 MiB: no older checkpoint removed to make room: {out[-1500:]}")
        check({m[4] for m in FINAL.finditer(out)} == ref2, f"W=2, 12 MiB: digests differ from {ref2}")
        got = ls(d)
        check(len(got) == 3 and got[1:] == ["ckpt-000000059.safetensors", "ckpt.lock"], f"W=2, 12 MiB: {got}")
    finally:
        for mnt in mounts:
            mnt.close()
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures()


if __name__ == "__main__":
    main()
