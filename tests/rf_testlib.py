"""Helpers shared by the Python integration tests (tests/*/*_test.py).

check() records a failed condition and goes on, so one run reports every failure;
run() runs a command with a deadline in its own session and, on expiry or when the test
itself is interrupted, SIGKILLs the whole process group (a launcher's workers die with it
by PDEATHSIG), so nothing is left running; digests() fingerprints a directory's files to
prove they were not touched.
"""
import glob
import hashlib
import os
import signal
import subprocess

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def run(cmd, log, deadline_s):
    """Runs cmd with stdout and stderr to log; returns (exit status or None on expiry, log text)."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
        except BaseException:
            # Interrupted (Ctrl-C, or a SIGTERM handler's SystemExit when a runner's time
            # limit stops this test): the command's own session would outlive us.
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise
    with open(log) as f:
        return rc, f.read()


def digests(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*"))):
        with open(path, "rb") as f:
            out[os.path.basename(path)] = hashlib.md5(f.read()).hexdigest()
    return out
