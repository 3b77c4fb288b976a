#!/usr/bin/env python3
"""Checkpoints on a real full disk: a small tmpfs.

    disk_full_tmpfs_test.py RINGFENCE TRAIN_MLP

One MLP checkpoint is 5.4 MB. On a 7 MiB tmpfs the first one fits and no second one can
be written next to it (retention never deletes the newest valid checkpoint before a newer
one is durable); on a 12 MiB tmpfs two fit, so each write makes room by removing the older.
  * train_mlp alone, 7 MiB: every periodic checkpoint after step 9 fails with ENOSPC as a
    warning naming step 9's file, training goes on to the end with the digest of the same
    run without checkpoints; the final one cannot be written either, so the run exits 1
    saying so and naming step 9's file, which is intact (resuming from it ends with the
    same digest) and the only file left (no partial temp file);
  * ringfence run -n 2, 7 MiB: the same, no restart, the failures counted in the summary;
    the job ends non-zero at once naming step 9's file (no worker dies at a checkpoint, no
    min-world timeout);
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
        d = f"{small.dir}/alone"
        rc, out = run([train_mlp, *QUICK, "--ckpt-dir", d, "--ckpt-every", "10"], f"{tmp}/alone7.txt", DEADLINE_S)
        newest = f"{d}/ckpt-000000009.safetensors"
        check(rc == 1, f"alone, 7 MiB: exit {rc}, expected 1 (the final state is not on disk): {out[-1500:]}")
        for s in (19, 29, 39, 49):
            check(f"ckpt: warning: step {s} not checkpointed: " in out, f"alone, 7 MiB: no warning for step {s}")
        check(re.search(r"ckpt: warning: step 19 not checkpointed: \S+: write failed: No space left on device; the "
                        rf"newest valid checkpoint is {re.escape(newest)} \(step 9\)", out),
              f"alone, 7 MiB: the warning does not name ENOSPC and {newest}: {out[-1500:]}")
        check(re.search(rf"train_mlp: error: the final state \(step 59, state {ref1}\) is not on disk: the checkpoint "
                        r"of step 59 could not be written \(.*No space left on device\); the newest valid checkpoint "
                        rf"is {re.escape(newest)}", out), f"alone, 7 MiB: no final error naming {newest}: {out[-1500:]}")
        m = ALONE.search(out)
        check(m and m[1] == ref1, f"alone, 7 MiB: digest {m[1] if m else None}, without checkpoints {ref1}")
        check(sorted(os.listdir(d)) == ["ckpt-000000009.safetensors", "ckpt.lock"], f"alone, 7 MiB: {os.listdir(d)}")
        rc, out = run([train_mlp, *QUICK, "--resume-from", newest], f"{tmp}/resumed.txt", DEADLINE_S)
        m = ALONE.search(out)
        check(rc == 0 and m and m[1] == ref1, f"resumed from {newest}: exit {rc}, digest {m[1] if m else None}")

        shutil.rmtree(f"{small.dir}/alone")  # the disk is the job's alone
        d = f"{small.dir}/job"
        job = [ringfence, "run", "-n", "2", "--summary", f"{tmp}/job7.json", "--"]
        rc, out = run([*job, train_mlp, *QUICK, "--ckpt-dir", d, "--ckpt-every", "10"], f"{tmp}/job7.txt", DEADLINE_S)
        s = summary(f"{tmp}/job7.json")
        check(rc == 1, f"W=2, 7 MiB: exit {rc}, expected 1: {out[-1500:]}")
        check(s.get("restarts") == 0, f"W=2, 7 MiB: {s.get('restarts')} restart(s)")
        # (how many: the writer defers a periodic checkpoint while a write runs)
        check(s.get("checkpoints_failed", 0) >= 1, f"W=2, 7 MiB: checkpoints_failed {s.get('checkpoints_failed')}")
        check("No space left on device" in s.get("checkpoint_error", ""), f"W=2, 7 MiB: {s.get('checkpoint_error')!r}")
        lost = re.search(r"the final state \(step 59, state (x3:[0-9a-f]{32})\) is not on disk", s.get("error", ""))
        check(lost and f"{d}/ckpt-000000009.safetensors" in s.get("error", ""), f"W=2, 7 MiB: error {s.get('error')!r}")
        check(lost and {lost[1]} == ref2, f"W=2, 7 MiB: the state not on disk {lost[1] if lost else None}, "
              f"without checkpoints {ref2}")
        check(s.get("wall_s", 99) < 30, f"W=2, 7 MiB: {s.get('wall_s')} s (a min-world timeout?)")
        left = {m[4] for m in FINAL.finditer(out)}  # slot 1 (it may be stopped before it says it)
        check(left <= ref2, f"W=2, 7 MiB: final digests {left}, without checkpoints {ref2}")
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
        got = sorted(os.listdir(d))
        check(len(got) == 3 and got[1:] == ["ckpt-000000059.safetensors", "ckpt.lock"], f"W=2, 12 MiB: {got}")
    finally:
        for mnt in mounts:
            mnt.close()
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures()


if __name__ == "__main__":
    main()
