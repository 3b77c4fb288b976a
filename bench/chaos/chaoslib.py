"""One `ringfence run` job of bench/recovery's worker, with a deadline, reaped by PID: shared by
chaos.py and no_false_recovery.py.

A job lives in its own folder (audit logs, --summary, --event-log, the launcher's output).
Every worker's command line names that folder (--audit-dir), which is how its processes are
found (tests/ddp/jobprocs.py) to be signalled, and to be proved gone at the end.
"""
import ctypes
import json
import os
import re
import fcntl
import select
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "ddp"))
from auditlog import read_audits  # noqa: E402  (shared with tests/ddp/fault_test.py)
from jobprocs import kill_job, procs_mentioning, signal_each  # noqa: E402

PR_SET_PDEATHSIG = 1  # <sys/prctl.h>
F_SETPIPE_SZ = 1031  # <fcntl.h>
PIPE_BYTES = 4096  # a piped job's pipe: one page, full after a few dozen lines
GONE_S = 10  # after the launcher ends, its workers must be gone within this (PDEATHSIG)
FINAL = re.compile(r"^recovery_worker slot (\d+): step (-?\d+) digest (\S*) recoveries (\d+)", re.M)


def die_with_parent():
    """(In the child, before exec) SIGKILL this process when the script dies, however it dies:
    the launcher, in its own session, would otherwise outlive a SIGKILLed script (its workers
    die with it: PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def poll_until(cond, end, ended=lambda: False, every_s=0.002):
    """Polls cond() every every_s (a condition, not a timed wait) until it holds (True),
    ended() holds or time.monotonic() passes end (False)."""
    while True:
        if cond():
            return True
        if ended() or time.monotonic() > end:
            return False
        time.sleep(every_s)


class AuditWatch:
    """The records appended to a folder's audit logs since the last call, read from where
    each file was left (the job runs on the same two cores: re-reading every log at each
    poll would take CPU from it)."""

    def __init__(self, aud):
        self.aud, self.pos = aud, {}

    def new_records(self):
        out = []
        for name in sorted(os.listdir(self.aud)):
            if not (name.startswith("audit-") and name.endswith(".jsonl")):
                continue
            with open(os.path.join(self.aud, name), "rb") as f:
                f.seek(self.pos.get(name, 0))
                data = f.read()
            complete = data[:data.rfind(b"\n") + 1]  # a record is complete at its newline
            self.pos[name] = self.pos.get(name, 0) + len(complete)
            out += [json.loads(x) for x in complete.split(b"\n") if x.strip()]
        return out


def events(path):
    """The coordinator's event log (--event-log), complete lines only (it may be read while
    the coordinator appends)."""
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        text = f.read()
    out = []
    for line in text[:text.rfind("\n") + 1].split("\n"):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # blank
    return out


def proc_env(pid):
    """(slot, incarnation) of a live worker process, or None (not a worker, a zombie, gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        return int(env[b"RINGFENCE_SLOT"]), int(env[b"RINGFENCE_INCARNATION"])
    except (OSError, KeyError, ValueError, IndexError):
        return None


class Job:
    """ringfence run -n world [--inject SPEC]... -- recovery_worker --model M --steps N.
    Default timeouts always: only the fault specs, where files go and (exact mode's shrink
    cases) --max-restarts 0 --min-world are passed."""

    def __init__(self, build, work, world, model, steps, injects=(), worker_flags=(), launcher_flags=(),
                 deadline_s=90.0):
        self.work, self.world, self.steps, self.deadline_s = work, world, steps, deadline_s
        mw = list(launcher_flags)
        self.min_world = int(mw[mw.index("--min-world") + 1]) if "--min-world" in mw else world
        self.aud = os.path.join(work, "aud")
        os.makedirs(self.aud, exist_ok=True)
        self.summary_path = os.path.join(work, "summary.json")
        self.events_path = os.path.join(work, "events.jsonl")
        self.output_path = os.path.join(work, "output.txt")
        self.cmd = [os.path.join(build, "bin", "ringfence"), "run", "-n", str(world), "--summary", self.summary_path,
                    "--event-log", self.events_path, *launcher_flags]
        for spec in injects:
            self.cmd += ["--inject", spec]
        self.cmd += ["--", os.path.join(build, "bin", "recovery_worker"), "--model", model, "--steps", str(steps),
                     "--audit-dir", self.aud, *worker_flags]
        self.p = None
        self.watch = None
        self.max_applied = -1
        self.rc = None
        self.timed_out = False
        self.left_running = []  # PIDs of this job still alive after the launcher ended (then killed)

    def start(self, piped=False):
        """piped: the launcher's output goes into a one-page pipe that a reader thread copies
        to output.txt, so a case can stop reading it (pause_reading) or read it slowly
        (read_slowly), as a paused terminal or a slow log shipper does."""
        self.out = open(self.output_path, "w")
        self.t0 = time.monotonic()
        self.end = self.t0 + self.deadline_s
        self.reader = None
        if piped:
            r, w = os.pipe()
            fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_BYTES)
            self.p = subprocess.Popen(self.cmd, stdout=w, stderr=w, start_new_session=True, preexec_fn=die_with_parent)
            os.close(w)
            self.reading = threading.Event()
            self.reading.set()
            self.read_rate = None  # bytes per second; None: as fast as it comes
            self.reader = threading.Thread(target=self._copy, args=(r,), daemon=True)
            self.reader.start()
        else:
            self.p = subprocess.Popen(self.cmd, stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=die_with_parent)
        return self

    def _copy(self, r):
        """The reader of a piped job: until every writer closed the pipe."""
        try:
            while True:
                if not self.reading.wait(0.05):
                    continue
                if not select.select([r], [], [], 0.05)[0]:
                    continue
                rate = self.read_rate
                data = os.read(r, 65536 if rate is None else max(1, int(rate / 20)))
                if not data:
                    return
                self.out.write(data.decode("utf-8", "replace"))
                if rate is not None:
                    time.sleep(0.05)
        finally:
            os.close(r)

    def pause_reading(self):
        self.reading.clear()

    def resume_reading(self):
        self.reading.set()

    def read_slowly(self, bytes_per_s):
        self.read_rate = bytes_per_s

    def ended(self):
        return self.p.poll() is not None

    def wait(self):
        """Until the launcher exits or the deadline, then stop(). Returns its exit status (None
        on the deadline)."""
        try:
            self.rc = self.p.wait(timeout=max(0.0, self.end - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.timed_out = True
        finally:
            self.stop()
        return self.rc

    def stop(self):
        """Kills whatever of the job still runs (the launcher's group, every worker by PID),
        reaps the launcher, and checks by PID that nothing of the job is left."""
        if self.p.poll() is None:
            try:
                kill_job(self.p, self.aud)
            except ProcessLookupError:  # it ended meanwhile
                self.p.wait()
        self.wall_s = time.monotonic() - self.t0
        if self.reader is not None:
            self.reading.set()
            self.read_rate = None
            self.reader.join(GONE_S)  # the pipe ends when the launcher and its workers are gone
        if not self.out.closed:
            self.out.close()
        if not poll_until(lambda: not procs_mentioning(self.aud), time.monotonic() + GONE_S):
            self.left_running = procs_mentioning(self.aud)
            signal_each(self.left_running, signal.SIGKILL)
            poll_until(lambda: not procs_mentioning(self.aud), time.monotonic() + GONE_S)

    def worker_pid(self, slot):
        """PID of the newest live incarnation of slot, or None."""
        found = [(e[1], pid) for pid in procs_mentioning(self.aud) if pid != self.p.pid
                 for e in [proc_env(pid)] if e and e[0] == slot]
        return max(found)[1] if found else None

    def audits(self):
        return read_audits(self.aud)

    def events(self):
        return events(self.events_path)

    def summary(self):
        try:
            with open(self.summary_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def output(self):
        with open(self.output_path, errors="replace") as f:
            return f.read()

    def finals(self):
        """{slot: (step, digest)} from each worker's last line (recovery_worker prints one when
        its training ends)."""
        return {int(m[1]): (int(m[2]), m[3]) for m in FINAL.finditer(self.output())}

    def wait_applied(self, step):
        """Until some worker applied step (its audit log), the job ended, or the deadline."""
        if self.watch is None:
            self.watch = AuditWatch(self.aud)

        def reached():
            self.max_applied = max([self.max_applied] + [x["s"] for x in self.watch.new_records()
                                                         if x["event"] == "apply"])
            return self.max_applied >= step
        return poll_until(reached, self.end, self.ended, every_s=0.01)

    def wait_event(self, event, since_us):
        """Until the coordinator logged event at or after since_us (wall clock, us), the job
        ended, or the deadline. Returns that event or None."""
        found = []

        def seen():
            found[:] = [e for e in self.events() if e.get("event") == event and e.get("ts_us", 0) >= since_us][:1]
            return bool(found)
        poll_until(seen, self.end, self.ended, every_s=0.005)
        return found[0] if found else None


def stop_on_sigterm():
    """SIGTERM (a test runner's timeout, kill PID) ends the script like ^C does: through the
    `finally`s that kill the running job and the hogs by PID. (By default it would end at
    once, and the launcher, in its own session, would outlive it.)"""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background by a shell
        signal.signal(signal.SIGINT, handler)


def tail(text, n=40):
    return "".join(text.splitlines(keepends=True)[-n:])
