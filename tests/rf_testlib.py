"""Helpers shared by the Python integration tests (tests/*/*_test.py).

check() records a failed condition and goes on, so one run reports every failure;
keep_or_remove() ends a test's work folder (kept, and named, when something failed) and
exit_on_failures() ends the test (exit 1 on a failure, else its OK line);
run() runs a command with a deadline in its own session and, on expiry or when the test
itself is interrupted, SIGKILLs the whole process group (a launcher's workers die with it
by PDEATHSIG), so nothing is left running; digests() fingerprints a directory's files to
prove they were not touched.
"""
import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def keep_or_remove(tmp, also=""):
    """The test's work folder: kept for a look when a check failed, else removed."""
    if failures:
        print(f"logs kept in {tmp}{also}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def exit_on_failures(ok_line=None):
    if failures:
        sys.exit(1)
    if ok_line:
        print(f"OK: {ok_line}")


def read_jsonl(path):
    """The whole records of a JSON-lines file that others may still append to: a torn or
    unparsable line is skipped; a missing file is []."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def load_json(path):
    """The JSON in path, or None when it is missing or not JSON (yet)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def wait_session(p, deadline_s):
    """Waits for p, started with start_new_session=True; its exit status, or None when the
    deadline passed (its process group is SIGKILLed and p reaped)."""
    try:
        return p.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return None
    except BaseException:
        # Interrupted (Ctrl-C, or a SIGTERM handler's SystemExit when a runner's time
        # limit stops this test): the command's own session would outlive us.
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise


def run(cmd, log, deadline_s):
    """Runs cmd with stdout and stderr to log; returns (exit status or None on expiry, log text)."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        rc = wait_session(p, deadline_s)
    with open(log) as f:
        return rc, f.read()


def digests(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*"))):
        with open(path, "rb") as f:
            out[os.path.basename(path)] = hashlib.md5(f.read()).hexdigest()
    return out
