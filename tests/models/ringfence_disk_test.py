#!/usr/bin/env python3
"""A checkpoint that cannot be written never costs the training.

    ringfence_disk_test.py RINGFENCE TRAIN_MLP

train_mlp under `ringfence run` (synthetic data, 100 steps, a checkpoint every 10, into
/dev/shm: a fast disk, so the writer is seldom busy and the fault lands on a periodic
checkpoint), at W = 1 and W = 2, at default settings, with storage faults at the
checkpoint writer (--inject disk:...):
  * ENOSPC, EIO, EROFS (and EDQUOT at W = 2) on the first checkpoint from step 15 (a periodic
    checkpoint is deferred while the previous write runs, so its step varies): the job ends
    DONE (exit 0) with no restart, the final digest equal to the same job without
    --ckpt-dir; rank 0 warns naming the error and the newest valid checkpoint, which it
    wrote before and which is still there when the next one is durable; no temp file is
    left; the launcher's end lines, the summary (checkpoints_failed 1, the error) and the
    event log (checkpoint_failed) show it; rank 0 neither exits nor is restarted;
  * EIO on the final checkpoint (step 99): the job ends non-zero at once, no restart, its
    error saying the final state (with its digest, the clean run's) is not on disk and
    naming the newest valid checkpoint, which is on disk;
  * a slow disk (3 s per write, two writes): DONE, no recovery, the same digest;
  * every checkpoint written under ringfence run records the optimizer's hyper-parameters
    and the data order, as one written by train_mlp alone does (before: {} and none).
Every run has a deadline; on expiry the launcher's process group is SIGKILLed.
"""
import errno
import json
import os
import re
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import load_json, check, read_jsonl, run  # noqa: E402

DEADLINE_S = 90
QUICK = ["--synthetic", "1024", "--batch", "64", "--epochs", "10", "--max-steps", "100", "--log-interval", "0"]
LAST = 99
FINAL = re.compile(r"^== train_mlp slot (\d+) incarnation (\d+): step (-?\d+), .* state (x3:[0-9a-f]{32})$", re.M)


def metadata(path):
    """A safetensors file's __metadata__ (8-byte header length, then the JSON header)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def job(ringfence, train_mlp, work, w, injects=(), ckpt=None):
    os.makedirs(work)
    cmd = [ringfence, "run", "-n", str(w), "--summary", f"{work}/summary.json", "--event-log", f"{work}/events.jsonl"]
    for spec in injects:
        cmd += ["--inject", spec]
    cmd += ["--", train_mlp, *QUICK]
    if ckpt:
        cmd += ["--ckpt-dir", ckpt, "--ckpt-every", "10"]
    rc, out = run(cmd, f"{work}/output.txt", DEADLINE_S)
    finals = {int(m[1]): (int(m[3]), m[4]) for m in FINAL.finditer(out)}
    return rc, out, load_json(f"{work}/summary.json") or {}, finals


def files(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def main():
    ringfence, train_mlp = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="rf_disk_")
    shm = tempfile.mkdtemp(prefix="rf_disk_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        ref = {}
        for w in (1, 2):
            rc, out, summ, finals = job(ringfence, train_mlp, f"{tmp}/ref{w}", w)
            check(rc == 0 and len(finals) == w, f"reference W={w}: exit {rc}, finals {finals}: {out[-1500:]}")
            ref[w] = next(iter(finals.values()))[1] if finals else None

        alone = f"{shm}/alone"
        rc, out = run([train_mlp, *QUICK, "--ckpt-dir", alone, "--ckpt-every", "10"], f"{tmp}/alone.txt", DEADLINE_S)
        check(rc == 0, f"train_mlp alone: exit {rc}: {out[-800:]}")
        alone_meta = metadata(f"{alone}/ckpt-{LAST:09d}.safetensors") if rc == 0 else {}

        cases = [(w, e) for w in (1, 2) for e in ("ENOSPC", "EIO", "EROFS")] + [(2, "EDQUOT")]
        for w, err in cases:
            name = f"W={w} {err} at step 19"
            work = f"{tmp}/{err}-w{w}"
            ck = f"{shm}/{err}-w{w}"
            rc, out, summ, finals = job(ringfence, train_mlp, work, w, [f"disk:rank=0:step=15:error={err}"], ck)
            text = os.strerror(getattr(errno, err))
            check(rc == 0 and summ.get("phase") == "DONE", f"{name}: exit {rc}, phase {summ.get('phase')}: {out[-1500:]}")
            check(summ.get("restarts") == 0, f"{name}: {summ.get('restarts')} restart(s): a checkpoint failure took a worker down")
            check(summ.get("checkpoints_failed") == 1, f"{name}: summary checkpoints_failed {summ.get('checkpoints_failed')}")
            check(text in summ.get("checkpoint_error", ""), f"{name}: summary checkpoint_error {summ.get('checkpoint_error')!r}")
            digests = {d for s, d in finals.values()}
            check(len(finals) == w and digests == {ref[w]}, f"{name}: finals {finals}, reference {ref[w]}")
            warn = re.search(r"ckpt: warning: step (\d+) not checkpointed: .*" + re.escape(text) +
                             r".*; the newest valid checkpoint is (\S+) \(step (\d+)\)\n", out)
            check(warn is not None and int(warn[1]) >= 15, f"{name}: no warning naming the error: {out[-1500:]}")
            if warn:
                # The newest valid one was written before, and stayed until a newer one was durable.
                before = out[:warn.start()]
                check(f"ckpt: wrote {warn[2]} " in before and int(warn[3]) < int(warn[1]),
                      f"{name}: the warning names {warn[2]}, not the last checkpoint written before")
                after = out[warn.end():]
                removed = after.find(f"ckpt: removed {warn[2]}")
                check(removed < 0 or after.rfind("ckpt: wrote ", 0, removed) >= 0,
                      f"{name}: {warn[2]} was removed before a newer checkpoint was durable")
            check("ringfence: 1 checkpoint(s) could not be written (training went on); the last: " in out,
                  f"{name}: the launcher's end lines do not count the failure")
            ev = [e for e in read_jsonl(f"{work}/events.jsonl") if e.get("event") == "checkpoint_failed"]
            check(len(ev) == 1 and text in ev[0].get("error", ""), f"{name}: event log checkpoint_failed: {ev}")
            got = files(ck)
            check(f"ckpt-{LAST:09d}.safetensors" in got and not any(f.endswith(".tmp") for f in got),
                  f"{name}: checkpoint files {got}")
            if os.path.exists(f"{ck}/ckpt-{LAST:09d}.safetensors"):
                meta = metadata(f"{ck}/ckpt-{LAST:09d}.safetensors")
                for key in ("optimizer_hparams", "data_order", "model", "optimizer"):
                    check(meta.get(key) == alone_meta.get(key),
                          f"{name}: metadata {key} {meta.get(key)!r}, train_mlp alone writes {alone_meta.get(key)!r}")

        for w in (1, 2):
            name = f"W={w} EIO on the final checkpoint"
            work = f"{tmp}/final-w{w}"
            ck = f"{shm}/final-w{w}"
            rc, out, summ, finals = job(ringfence, train_mlp, work, w, [f"disk:rank=0:step={LAST}:error=EIO"], ck)
            check(rc not in (0, None), f"{name}: exit {rc}, expected a failure: {out[-1500:]}")
            check(summ.get("restarts") == 0, f"{name}: {summ.get('restarts')} restart(s)")
            error = summ.get("error", "")
            m = re.search(rf"the final state \(step {LAST}, state {ref[w]}\) is not in the checkpoint directory: the checkpoint of step {LAST} "
                          r"could not be written \(.*Input/output error\); the newest valid checkpoint is "
                          r"\S+/(ckpt-\d{9}\.safetensors) \(step \d+\)", error)
            check(m is not None, f"{name}: summary error {error!r}")
            got = files(ck)
            check(m is not None and m[1] in got and not any(f.endswith(".tmp") for f in got), f"{name}: files {got}")

        name = "W=2 a slow disk"
        rc, out, summ, finals = job(ringfence, train_mlp, f"{tmp}/slow", 2, ["disk:rank=0:step=9:delay=3:writes=2"],
                                    f"{shm}/slow")
        check(rc == 0 and summ.get("phase") == "DONE", f"{name}: exit {rc}: {out[-1500:]}")
        check(summ.get("recoveries") == [] and summ.get("checkpoints_failed") == 0,
              f"{name}: recoveries {summ.get('recoveries')}, failed {summ.get('checkpoints_failed')}")
        check({d for s, d in finals.values()} == {ref[2]}, f"{name}: finals {finals}, reference {ref[2]}")
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures()


if __name__ == "__main__":
    main()
