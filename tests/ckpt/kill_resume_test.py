#!/usr/bin/env python3
"""SIGKILL a training run, mid-training and in the middle of a checkpoint write, then
--resume: the final state digest equals the uninterrupted run's (docs/protocol.md "Whole-job
failure", R3). Also: a damaged newest checkpoint is skipped with a warning naming it, a
second writer on a directory in use is refused, the final checkpoint opens in Python's
safetensors, and SIGTERM is a graceful stop that checkpoints and resumes exactly.

    kill_resume_test.py TRAIN_PROGRAM

Every child runs in its own process group with a deadline, is reaped by PID, and is
killed (group) on any failure. Synchronisation is on output lines, never on sleeps. The
whole script has one deadline below ctest's TIMEOUT. Python's safetensors + numpy are
required (scripts/setup installs them); without them the test fails saying so.
"""
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

PROG = sys.argv[1]
ARGS = ["--synthetic", "3000", "--batch", "32", "--epochs", "2", "--max-steps", "150", "--seed", "5",
        "--log-interval", "10"]
# Each child's own deadline, and one deadline for the whole script: the total stays below
# ctest's TIMEOUT (240 s, tests/ckpt/CMakeLists.txt), so on a hang this script kills its
# children and prints what it saw instead of ctest killing it silently.
DEADLINE_S = 120
TOTAL_DEADLINE_S = 200
START = time.monotonic()
children = []


def time_left():
    """Seconds a wait may still take: the child's deadline, capped by the total one."""
    left = START + TOTAL_DEADLINE_S - time.monotonic()
    if left <= 0:
        fail(f"the test's total deadline of {TOTAL_DEADLINE_S} s has passed")
    return min(DEADLINE_S, left)


def fail(msg):
    for p in children:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def start(extra, merge_stderr=True):
    p = subprocess.Popen([PROG] + ARGS + extra, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                         start_new_session=True, text=True)
    children.append(p)
    return p


def run(extra):
    """Runs to completion within the deadline; returns (returncode, output)."""
    p = start(extra)
    try:
        out, _ = p.communicate(timeout=time_left())
    except subprocess.TimeoutExpired:
        fail(f"{' '.join(extra)}: no exit within its deadline (child {DEADLINE_S} s, total {TOTAL_DEADLINE_S} s)")
    return p.returncode, out


def wait_for_line(p, stream, needle):
    """Reads p's lines until one contains needle (the condition); returns all read."""
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    seen = []
    end = time.monotonic() + time_left()
    while True:
        left = end - time.monotonic()
        if left <= 0 or not sel.select(timeout=left):
            fail(f"no line with {needle!r} within the deadline; got:\n" + "".join(seen))
        line = stream.readline()
        if not line:
            fail(f"exited ({p.wait()}) before a line with {needle!r}; got:\n" + "".join(seen))
        seen.append(line)
        if needle in line:
            return "".join(seen)


def kill(p):
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()  # reaped by PID
    if p.returncode != -signal.SIGKILL:
        fail(f"expected the run to die by SIGKILL, it exited {p.returncode}")


def digest(path):
    with open(path) as f:
        return json.load(f)


def resume_and_compare(tag, d, ref, expect_in_log=()):
    m = os.path.join(d, f"{tag}.json")
    rc, out = run(["--ckpt-dir", os.path.join(d, tag), "--ckpt-every", "10", "--resume", "--metrics", m])
    if rc != 0:
        fail(f"{tag}: resumed run exited {rc}:\n{out}")
    for needle in expect_in_log:
        if needle not in out:
            fail(f"{tag}: resumed run's output lacks {needle!r}:\n{out}")
    got = digest(m)
    if got["state_digest"] != ref["state_digest"]:
        fail(f"{tag}: final state {got['state_digest']} != uninterrupted {ref['state_digest']}:\n{out}")
    print(f"ok {tag}: resumed after step {got['resumed_step']}, final state {got['state_digest']} == uninterrupted")
    return got, out


PY_CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
from check_with_python import crc32c
path, digest = sys.argv[1], sys.argv[2]
t = load_file(path)
meta = safe_open(path, framework="numpy").metadata()
assert meta["step"] == "149" and meta["model"] == "mlp" and meta["optimizer"] == "sgd", meta
assert meta["rf_state_digest"] == digest, (meta["rf_state_digest"], digest)
assert t["1.weight"].shape == (512, 784) and t["1.weight"].dtype == np.float32
assert t["optim.1.weight.momentum_buffer"].shape == (512, 784)
assert t["optim.5.bias.step"].shape == () and int(t["optim.5.bias.step"]) == 150
crcs = json.loads(meta["crc32c"])
assert sorted(crcs) == sorted(t), "a CRC for every tensor"
for name, a in t.items():
    assert crcs[name] == "%08x" % crc32c(a.tobytes()), name
print("ok python: the final checkpoint opens with safetensors", len(t), "tensors, CRCs recomputed, step 149")
"""


def find_python_with_safetensors():
    """The python3 that has the safetensors and numpy packages. They are required, not
    optional: scripts/setup installs them, so a missing one is a broken setup, reported
    as a failure with the fix rather than a silently smaller test."""
    tried = []
    for py in ("/usr/bin/python3", "python3"):
        try:
            r = subprocess.run([py, "-c", "import safetensors.numpy, numpy"], capture_output=True, text=True,
                               timeout=min(30, time_left()))
        except subprocess.TimeoutExpired:
            tried.append(f"{py}: no answer within 30 s")
            continue
        except FileNotFoundError:
            tried.append(f"{py}: not found")
            continue
        if r.returncode == 0:
            return py
        tried.append(f"{py}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'exit %d' % r.returncode}")
    fail("the Python check needs python3 with the 'safetensors' and 'numpy' packages; install them with "
         "scripts/setup (or: python3 -m pip install safetensors numpy). Tried:\n  " + "\n  ".join(tried))


def python_check(path, metrics):
    """The checkpoint a training run wrote opens with Python's safetensors package."""
    here = os.path.dirname(os.path.abspath(__file__))
    py = find_python_with_safetensors()
    try:
        r = subprocess.run([py, "-c", PY_CHECK, path, metrics["state_digest"], here], capture_output=True,
                           text=True, timeout=time_left())
    except subprocess.TimeoutExpired:
        fail(f"python check of {path}: no exit within its deadline")
    if r.returncode != 0:
        fail(f"python check of {path}:\n{r.stdout}{r.stderr}")
    print(r.stdout.strip())


def main():
    find_python_with_safetensors()  # a broken setup fails now, not after the long runs
    d = tempfile.mkdtemp(prefix="rf_kill_resume_")
    ref_path = os.path.join(d, "ref.json")
    rc, out = run(["--metrics", ref_path])
    if rc != 0:
        fail(f"uninterrupted run exited {rc}:\n{out}")
    ref = digest(ref_path)
    print("uninterrupted:", ref["state_digest"], "after", ref["steps"], "steps")

    # 1. Killed mid-training, right after the checkpoint of step 29 is on disk.
    p = start(["--ckpt-dir", os.path.join(d, "mid"), "--ckpt-every", "10"])
    wait_for_line(p, p.stdout, "ckpt-000000029.safetensors")
    kill(p)
    got, _ = resume_and_compare("mid", d, ref, ["== resumed from"])
    if not 29 <= got["resumed_step"] < ref["steps"] - 1:
        fail(f"mid: resumed from step {got['resumed_step']}, expected a mid-training checkpoint")

    python_check(os.path.join(d, "mid", "ckpt-000000149.safetensors"), got)

    # 2. Killed inside the write of the checkpoint of step 59 (temp file half written). While
    #    it is paused there it holds the directory: a second writer must be refused.
    wdir = os.path.join(d, "write")
    p = start(["--ckpt-dir", wdir, "--ckpt-every", "10", "--ckpt-test-pause-in-write", "59"],
              merge_stderr=False)
    wait_for_line(p, p.stderr, "paused inside the write")
    temp = os.path.join(wdir, ".ckpt-000000059.safetensors.tmp")
    if not os.path.exists(temp):
        fail("no half-written temp file while paused in the write")
    rc, out = run(["--ckpt-dir", wdir, "--resume"])
    if rc != 1 or "another checkpoint writer" not in out:
        fail(f"a second writer on {wdir} was not refused (exit {rc}):\n{out}")
    print("ok lock: a second writer is refused while the first holds the directory")
    kill(p)
    if os.path.exists(os.path.join(wdir, "ckpt-000000059.safetensors")):
        fail("a checkpoint name appeared for a write that never finished")
    resume_and_compare("write", d, ref, ["(left by an interrupted write)", "ckpt-000000049.safetensors (step 49)"])

    # 3. Killed, then the newest checkpoint damaged on disk: skipped with a warning naming
    #    the file and the reason, the previous one used, same final state.
    p = start(["--ckpt-dir", os.path.join(d, "damaged"), "--ckpt-every", "10"])
    wait_for_line(p, p.stdout, "ckpt-000000039.safetensors")
    kill(p)
    files = sorted(f for f in os.listdir(os.path.join(d, "damaged")) if f.startswith("ckpt-"))
    newest = os.path.join(d, "damaged", files[-1])
    with open(newest, "r+b") as f:
        f.seek(-7, os.SEEK_END)
        b = f.read(1)
        f.seek(-7, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))
    got, out = resume_and_compare("damaged", d, ref, [f"warn ckpt: resume: skipping {newest}", "corrupted"])
    if got["resumed_step"] >= int(files[-1][5:14]):
        fail("damaged: resumed from the damaged file")

    # 4. A graceful stop (SIGTERM): training ends after the step in flight, checkpoints it
    #    and exits 0; --resume continues from exactly there.
    sdir = os.path.join(d, "term")
    p = start(["--ckpt-dir", sdir, "--ckpt-every", "10", "--metrics", os.path.join(d, "term_stop.json")])
    wait_for_line(p, p.stdout, "ckpt-000000029.safetensors")
    os.killpg(p.pid, signal.SIGTERM)
    try:
        out, _ = p.communicate(timeout=time_left())
    except subprocess.TimeoutExpired:
        fail("no exit within the deadline after SIGTERM")
    if p.returncode != 0 or "== stop requested: stopping after step" not in out:
        fail(f"graceful stop: exit {p.returncode}, output:\n{out}")
    stopped = digest(os.path.join(d, "term_stop.json"))
    last = stopped["steps"] - 1
    if not stopped["stopped"] or not os.path.exists(os.path.join(sdir, f"ckpt-{last:09d}.safetensors")):
        fail(f"graceful stop after step {last}: no checkpoint of it, or metrics without stopped:\n{out}")
    got, _ = resume_and_compare("term", d, ref, [f"(step {last}), continuing at step {last + 1}"])
    print(f"ok term: SIGTERM stopped after step {last} with a checkpoint of it")

    subprocess.run(["rm", "-rf", d], check=True)
    print("PASS")


if __name__ == "__main__":
    main()
