#!/usr/bin/env python3
"""Exact mode end to end (docs/exact.md): train_mlp and train_cnn under `ringfence run`.

    exact_test.py RINGFENCE TRAIN_MLP TRAIN_CNN

1. train_mlp --exact (Fashion-MNIST, 40 steps) at W = 1, 2, 3 and 4, and by hand (one
   process, no launcher): one digest; the float
   sum at W = 2 and 3: other digests (they differ from each other too). train_cnn --exact
   (10 steps) at W = 1 and 3: one digest.
2. Resume on another W: a W = 4 exact job checkpointing every 10 steps is SIGKILLed
   (launcher and workers) once rank 0 froze before step 26; --resume with W = 3 ends
   bitwise equal to the uninterrupted run. Resuming the same directory without --exact is
   refused naming both settings.
   By hand, SIGINT after step 5 stops it after the step in flight: exit 0, the final
   checkpoint of that step written; and 20 steps by hand into a directory, then --resume
   by hand to step 40, end on exact mode's digest.
3. Bad input, before any step: --micro-shards not dividing --batch, --micro-shards without
   --exact (exit 2 each, with the reason); W > M under ringfence run: the job STOPs naming
   it, nobody restarted.
Every run has a deadline; on expiry its process group is SIGKILLed and the test fails.
"""
import glob
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddp"))
import rf_testlib  # noqa: E402
from rf_testlib import check  # noqa: E402
from jobprocs import kill_job, procs_mentioning  # noqa: E402

DEADLINE_S = 90
DIGEST = re.compile(r"state (x\d+:[0-9a-f]{32})")


def run(cmd, log):
    return rf_testlib.run(cmd, log, DEADLINE_S)


def final_digests(out):
    return set(DIGEST.findall(out))


def job(ringfence, w, *extra):
    return [ringfence, "run", "-n", str(w), "--quiet", *extra, "--"]


def main():
    ringfence, train_mlp, train_cnn = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="rf_exact_")
    mlp = [train_mlp, "--max-steps", "40", "--log-interval", "0"]
    try:
        # 1. one digest for every W
        seen = {}
        for w in (1, 2, 3, 4):
            rc, out = run([*job(ringfence, w), *mlp, "--exact"], f"{tmp}/mlp-exact-w{w}.txt")
            check(rc == 0, f"mlp --exact W={w}: exit {rc}: {out[-600:]}")
            seen[w] = final_digests(out)
            check(len(seen[w]) == 1, f"mlp --exact W={w}: replicas disagree or no digest: {seen[w]}")
        rc, out = run([*mlp, "--exact"], f"{tmp}/mlp-exact-alone.txt")
        check(rc == 0, f"mlp --exact by hand: exit {rc}: {out[-600:]}")
        seen["alone"] = final_digests(out)
        check(len(set().union(*seen.values())) == 1, f"mlp --exact: digests differ across W: {seen}")
        exact_digest = next(iter(seen[1]), None)
        floats = {}
        for w in (2, 3):
            rc, out = run([*job(ringfence, w), *mlp], f"{tmp}/mlp-float-w{w}.txt")
            check(rc == 0, f"mlp float W={w}: exit {rc}")
            floats[w] = final_digests(out)
        check(exact_digest not in floats[2] | floats[3], f"the float sum gave exact mode's digest: {floats}")
        check(floats[2] != floats[3], f"the float sum gave one digest at W = 2 and 3 ({floats}): the test shows nothing")
        cnn = {}
        for w in (1, 3):
            rc, out = run([*job(ringfence, w), train_cnn, "--max-steps", "10", "--log-interval", "0", "--exact"],
                          f"{tmp}/cnn-exact-w{w}.txt")
            check(rc == 0, f"cnn --exact W={w}: exit {rc}: {out[-600:]}")
            cnn[w] = final_digests(out)
        check(len(cnn[1]) == 1 and cnn[1] == cnn[3], f"cnn --exact: digests differ across W: {cnn}")
        print(f"exact mode: mlp {exact_digest} at W = 1..4 and by hand (float: W=2 {floats[2]}, W=3 {floats[3]}); cnn {cnn[1]}")

        # 2. resume on another W after a kill -9 of the whole job
        long = [train_mlp, "--max-steps", "60", "--log-interval", "0", "--exact"]
        rc, out = run([*job(ringfence, 2), *long], f"{tmp}/uninterrupted.txt")
        check(rc == 0, f"uninterrupted run: exit {rc}")
        want = final_digests(out)
        d, audit = os.path.join(tmp, "ckpt"), os.path.join(tmp, "audit.jsonl")
        # Rank 1 stops at step 26, so the job freezes there (until its lease runs out); rank 0,
        # the checkpoint writer, goes on, and the job is killed once it froze and a checkpoint
        # is on disk (stopping rank 0 would freeze its background writer too, and a loaded
        # machine may not have finished writing step 19's by then).
        cmd = [*job(ringfence, 4, "--inject", "stop:rank=1:step=26:phase=forward"), *long,
               "--ckpt-dir", d, "--ckpt-every", "10", "--audit-log", audit]
        with open(f"{tmp}/killed.txt", "w") as log:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            t_end = time.monotonic() + DEADLINE_S
            frozen = written = False
            while not (frozen and written) and p.poll() is None and time.monotonic() < t_end:
                frozen = frozen or (os.path.exists(audit) and '"inject"' in open(audit).read())
                written = bool(glob.glob(os.path.join(d, "ckpt-*.safetensors")))
                time.sleep(0.002)  # polling files for a condition, not a timed wait for one
            kill_job(p, d)
        check(frozen, "the W = 4 job never froze before step 26")
        while procs_mentioning(d) and time.monotonic() < t_end:
            time.sleep(0.002)
        check(not procs_mentioning(d), "processes of the killed job survived")
        files = sorted(glob.glob(os.path.join(d, "ckpt-*.safetensors")))
        check(bool(files), "the killed job left no checkpoint")
        rc, out = run([*job(ringfence, 3), *long, "--ckpt-dir", d, "--resume"], f"{tmp}/resumed-w3.txt")
        check(rc == 0, f"resume with W = 3: exit {rc}: {out[-600:]}")
        resumed = re.findall(r"resumed from \S+ \(step (\d+)\)", out)
        check(bool(resumed), "the W = 3 job did not say which checkpoint it resumed")
        check(final_digests(out) == want and len(want) == 1,
              f"resumed on W = 3: {final_digests(out)}, uninterrupted {want}")
        print(f"killed at W = 4 (checkpoints {[os.path.basename(f) for f in files]}), resumed at W = 3 from step "
              f"{resumed[:1]}: {final_digests(out)} == uninterrupted {want}")
        rc, out = run([*job(ringfence, 2), train_mlp, "--max-steps", "70", "--log-interval", "0", "--ckpt-dir", d,
                       "--resume"], f"{tmp}/resumed-float.txt")
        check(rc not in (0, None), f"an exact-mode checkpoint resumed without --exact: exit {rc}, expected a failure")
        check("was trained in exact mode with 8 micro-shards" in out and "with the float sum" in out,
              f"the refusal does not name both settings: {out[-800:]}")

        # by hand, a graceful stop: SIGINT once step 5 is logged
        d2 = os.path.join(tmp, "alone-stop")
        p = subprocess.Popen([train_mlp, "--exact", "--log-interval", "1", "--ckpt-dir", d2], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        t_end, seen_step, lines = time.monotonic() + DEADLINE_S, False, []
        while not seen_step and time.monotonic() < t_end and p.poll() is None:
            if select.select([p.stdout], [], [], 1.0)[0]:
                lines.append(p.stdout.readline())
                seen_step = "step 5/" in lines[-1]
        if seen_step:
            p.send_signal(signal.SIGINT)
        try:
            rest, _ = p.communicate(timeout=max(1.0, t_end - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            rest, _ = p.communicate()
        out = "".join(lines) + rest
        stopped = re.findall(r"step (\d+), generation 1, world 1", out)
        check(seen_step and p.returncode == 0 and len(stopped) == 1,
              f"--exact by hand, SIGINT after step 5: exit {p.returncode}: {out[-600:]}")
        if stopped:
            ck = f"ckpt-{int(stopped[0]):09d}.safetensors"
            check(int(stopped[0]) < 468, f"--exact by hand: SIGINT after step 5 did not stop it (it ended at step "
                                         f"{stopped[0]}, the last)")
            check(os.path.exists(os.path.join(d2, ck)), f"--exact by hand, stopped at step {stopped[0]}: no {ck} in "
                                                        f"{os.listdir(d2)}")

        # by hand, resumed: 20 steps, then --resume to 40, exact mode's digest
        d3 = os.path.join(tmp, "alone-ckpt")
        rc, out = run([train_mlp, "--max-steps", "20", "--log-interval", "0", "--exact", "--ckpt-dir", d3],
                      f"{tmp}/alone-half.txt")
        check(rc == 0, f"--exact by hand, 20 steps: exit {rc}: {out[-300:]}")
        rc, out = run([*mlp, "--exact", "--ckpt-dir", d3, "--resume"], f"{tmp}/alone.txt")
        check(rc == 0 and "(step 19), continuing at step 20" in out and final_digests(out) == {exact_digest},
              f"--exact --resume by hand: exit {rc}, digests {final_digests(out)}, exact mode's {exact_digest}: "
              f"{out[-300:]}")

        # 3. bad input
        for args, want_text in ((["--exact", "--micro-shards", "5"], "does not divide the global batch"),
                                (["--micro-shards", "4"], "--micro-shards: needs --exact")):
            rc, out = run([*job(ringfence, 2), *mlp, *args], f"{tmp}/bad.txt")
            check(rc not in (0, None) and want_text in out, f"{args}: exit {rc}, output {out[-400:]}")
        rc, out = run([*job(ringfence, 3), *mlp, "--exact", "--micro-shards", "2", "--batch", "64"], f"{tmp}/w-gt-m.txt")
        check(rc == 1 and "3 ranks for 2 micro-shards" in out and "job STOPPED" in out,
              f"W > M: exit {rc}: {out[-600:]}")
        check("restarted" not in out, f"W > M: a worker was restarted: {out[-600:]}")
    finally:
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures("exact mode: one digest for every W, resume on another W, bad input refused")


if __name__ == "__main__":
    main()
