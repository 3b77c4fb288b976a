#!/usr/bin/env python3
"""An output that nobody reads costs the job nothing (docs/launcher.md, "Output").

    output_stall_test.py RINGFENCE TRAIN_MLP [unread|paused]

`ringfence run -n 4 -- train_mlp --log-interval 1` writes its output into a pipe this test
shrinks to one page (4 KiB) and does not read, as a paused terminal, `| less` or a stalled
ssh link does. Without the launcher's output pump a worker's write blocks inside a step once
the pipe is full; the coordinator takes it for a hang and evicts and restarts every worker.

  unread  No fault. The pipe is left unread from the moment it is full until the workers
          have applied STEPS_WHILE_UNREAD more steps (audited) and HOLD_S have passed,
          longer than the coordinator's hang bound. Then: exit 0, DONE, no recovery, no
          restart, no eviction; rank 0's progress lines all there, in order, nothing
          dropped.
  paused  The same unread pipe; once it is full and the job went on, slot 1's worker is
          SIGSTOPped from outside (by pid, as a debugger or a container freeze does) and
          SIGCONTed once the event log shows it evicted and the job RUNNING again; the pipe
          stays unread until the new generation has applied steps. Then: exactly one
          eviction (slot 1), one recovery, one restart, no whole-job restart, every slot
          ends on one digest, and the recovery took at most the lease + RECOVERY_SLACK_MS
          (a restart after a stall took 3.6 s and more; the slack is for a loaded
          2-core CI machine: the lease + 0.5 s is the figure measured on a quiet one).

Every condition waits with a deadline; when it passes (the job stalled, as it does without
the pump) the pipe is read anyway, so the job ends and the checks say what it cost. The
launcher's process group is SIGKILLed at the overall deadline.
"""
import ctypes
import fcntl
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rf_testlib import check, exit_on_failures, failures, keep_or_remove, load_json, read_jsonl  # noqa: E402

W = 4
STEPS = 2000              # about 7 s here at W = 4: the 3 s unread window lands mid-run on a machine twice as fast
STEPS_WHILE_UNREAD = 300  # applied after the pipe filled: a blocked writer would stall them all
HOLD_S = 3.0              # unread at least this long: past the coordinator's hang bound (2 s)
LEASE_MS = 1000           # the launcher's default --lease
RECOVERY_SLACK_MS = 1500
PIPE_BYTES = 4096
DEADLINE_S = 120
F_SETPIPE_SZ = 1031
FINAL = re.compile(r"^== train_mlp slot (\d+) incarnation (\d+): step (-?\d+), generation \d+, world (\d+), "
                   r"recoveries \d+, state (x3:[0-9a-f]{32})$", re.M)
PROGRESS = re.compile(r"info worker: step (\d+)/%d " % STEPS)


def die_with_parent():
    """(In the launcher, before exec) SIGKILL it when this script dies, however it dies: in
    its own session it would outlive a killed script (its workers die with it: PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Job:
    def __init__(self, ringfence, train_mlp, work):
        self.work = work
        self.audit, self.events = f"{work}/audit.jsonl", f"{work}/events.jsonl"
        r, w = os.pipe()
        fcntl.fcntl(w, F_SETPIPE_SZ, PIPE_BYTES)
        self.pipe = r
        cmd = [ringfence, "run", "-n", str(W), "--summary", f"{work}/summary.json", "--event-log", self.events,
               "--run-dir", f"{work}/run", "--", train_mlp, "--synthetic", "4096", "--batch", "64", "--epochs", "100",
               "--max-steps", str(STEPS), "--log-interval", "1", "--audit-log", self.audit]
        self.proc = subprocess.Popen(cmd, stdout=w, stderr=w, start_new_session=True, preexec_fn=die_with_parent)
        os.close(w)
        self.started = time.monotonic()
        self.output = b""

    def left(self):
        return DEADLINE_S - (time.monotonic() - self.started)

    def applied(self, min_generation=0):
        """The largest step any worker applied (in a generation >= min_generation), or -1."""
        return max((r["s"] for r in read_jsonl(self.audit) if r.get("event") == "apply" and r.get("g", 0) >= min_generation),
                   default=-1)

    def event(self, kind, **match):
        return [e for e in read_jsonl(self.events) if e.get("event") == kind and all(e.get(k) == v for k, v in match.items())]

    def wait(self, what, cond, limit_s):
        """Polls cond() until it holds (True) or limit_s / the job's deadline passes (False)."""
        until = time.monotonic() + min(limit_s, max(self.left(), 0))
        while time.monotonic() < until:
            if cond():
                return True
            if self.proc.poll() is not None and not cond():
                break
            time.sleep(0.02)
        ok = cond()
        check(ok, f"{what}: not within {limit_s:.0f} s")
        return ok

    def blocked_writers(self):
        """The threads of the launcher and its workers asleep in a write to a full pipe: the
        launcher's output pump once the unread pipe filled, or (without the pump) the
        worker whose output filled it."""
        found = []
        for pid in [self.proc.pid] + children(self.proc.pid):
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                        if f.read().endswith("pipe_write"):  # anon_pipe_write on newer kernels
                            found.append((pid, int(tid)))
            except OSError:
                continue
        return found

    def wait_full(self):
        """The pipe is full: a writer waits in write(2) until someone reads. (How many bytes
        that takes depends on the writes' sizes: the kernel fills a pipe by pages.)"""
        return self.wait("a writer blocked on the full output pipe", lambda: bool(self.blocked_writers()), 30)

    def read_to_end(self):
        """Reads the pipe until every writer closed it; then reaps the launcher."""
        chunks = []
        while self.left() > 0:
            ready, _, _ = select.select([self.pipe], [], [], min(1.0, self.left()))
            if ready:
                data = os.read(self.pipe, 65536)
                if not data:
                    break
                chunks.append(data)
        try:
            self.rc = self.proc.wait(timeout=max(self.left(), 1))
        except subprocess.TimeoutExpired:
            self.rc = None
        self.kill()
        self.output = b"".join(chunks).decode("utf-8", "replace")
        with open(f"{self.work}/output.txt", "w") as f:
            f.write(self.output)
        return self.output

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def close(self):
        self.kill()
        os.close(self.pipe)


def resume(pid):
    """SIGCONT pid, unless it is gone (the launcher SIGKILLs an evicted worker)."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def children(parent):
    """The pids whose parent is `parent`."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        out.append(int(pid))
            except (OSError, ValueError, IndexError):
                continue
    return out


def worker_pid(launcher, slot):
    """The pid of the launcher's child whose environment says RINGFENCE_SLOT=slot."""
    for pid in children(launcher):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RINGFENCE_SLOT={slot}".encode() in f.read().split(b"\0"):
                    return pid
        except OSError:
            continue
    return None


def check_end(name, job, summary, restarts):
    check(job.rc == 0, f"{name}: launcher exit {job.rc}")
    check(summary is not None and summary.get("phase") == "DONE", f"{name}: job not DONE")
    finals = {}
    for slot, inc, step, world, digest in FINAL.findall(job.output):
        finals[int(slot)] = (int(step), int(world), digest)
    check(sorted(finals) == list(range(W)), f"{name}: final lines from slots {sorted(finals)}, want 0..{W - 1}")
    check(all(f[0] == STEPS - 1 and f[1] == W for f in finals.values()), f"{name}: not every slot ended at the last step, W {W}: {finals}")
    check(len({f[2] for f in finals.values()}) == 1, f"{name}: replicas differ at the end: {finals}")
    check("started again at step 0" not in job.output, f"{name}: the job started again at step 0")
    if summary:
        check(summary.get("restarts") == restarts, f"{name}: {summary.get('restarts')} restart(s), want {restarts}")


def case_unread(ringfence, train_mlp, work):
    job = Job(ringfence, train_mlp, work)
    try:
        if job.wait_full():
            full_at, from_step = time.monotonic(), job.applied()
            job.wait(f"{STEPS_WHILE_UNREAD} steps applied while the output was unread",
                     lambda: job.applied() >= min(from_step + STEPS_WHILE_UNREAD, STEPS - 1), 30)
            unread_s = time.monotonic() - full_at
            if unread_s < HOLD_S and job.proc.poll() is None:
                time.sleep(HOLD_S - unread_s)
            print(f"unread: output unread for {time.monotonic() - full_at:.1f} s from step {from_step}; "
                  f"step {job.applied()} applied meanwhile", flush=True)
        job.read_to_end()
    finally:
        job.close()
    summary = load_json(f"{work}/summary.json")
    check_end("unread", job, summary, restarts=0)
    check(summary is not None and summary.get("recoveries") == [], f"unread: recoveries {summary and summary.get('recoveries')}")
    evicted = job.event("evict") + job.event("fail")
    check(not evicted, f"unread: workers evicted or failed: {evicted}")
    steps = [int(s) for s in PROGRESS.findall(job.output)]
    check(steps == list(range(1, STEPS + 1)), f"unread: rank 0's progress lines are not steps 1..{STEPS} in order "
          f"({len(steps)} lines)")
    check("dropped here" not in job.output, "unread: output was dropped (the queue holds far more than this job writes)")


def case_paused(ringfence, train_mlp, work):
    job = Job(ringfence, train_mlp, work)
    stopped = None
    try:
        if job.wait_full():
            from_step = job.applied()
            if job.wait("20 steps applied after the pipe filled", lambda: job.applied() >= from_step + 20, 30):
                stopped = worker_pid(job.proc.pid, 1)
                check(stopped is not None, "paused: no worker of slot 1 found")
            if stopped:
                os.kill(stopped, signal.SIGSTOP)
                at_step = job.applied()
                job.wait("slot 1 evicted", lambda: job.event("evict", worker={"incarnation": 0, "slot": 1}), 30)
                job.wait("the job RUNNING again", lambda: [e for e in job.event("running") if e["g"] >= 2], 30)
                resume(stopped)
                job.wait("50 steps applied by the new generation",
                         lambda: job.applied(min_generation=2) >= min(at_step + 50, STEPS - 1), 30)
                print(f"paused: slot 1 (pid {stopped}) stopped at step {at_step}; step {job.applied()} applied "
                      f"before the output was read", flush=True)
        job.read_to_end()
    finally:
        if stopped:
            resume(stopped)
        job.close()
    summary = load_json(f"{work}/summary.json")
    check_end("paused", job, summary, restarts=1)
    evicted = [(e["worker"]["slot"], e["worker"]["incarnation"]) for e in job.event("evict") + job.event("fail")]
    check(evicted == [(1, 0)], f"paused: evicted or failed {evicted}, want slot 1 alone")
    recs = summary.get("recoveries", []) if summary else []
    check(len(recs) == 1, f"paused: {len(recs)} recoveries, want 1")
    for r in recs:
        check(not r.get("whole_job_restart"), "paused: a whole-job restart")
        check(r.get("worker", {}).get("slot") == 1, f"paused: the recovery names {r.get('worker')}, want slot 1")
        total = r.get("total_ms") or 0
        check(total <= LEASE_MS + RECOVERY_SLACK_MS, f"paused: recovery took {total:.0f} ms, more than the lease "
              f"+ {RECOVERY_SLACK_MS} ms")
        print(f"paused: recovery {total:.0f} ms, cause {r.get('cause')}", flush=True)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    ringfence, train_mlp = sys.argv[1:3]
    cases = {"unread": case_unread, "paused": case_paused}
    chosen = sys.argv[3:] or list(cases)
    tmp = tempfile.mkdtemp(prefix="rf_output_stall_")
    try:
        for name in chosen:
            t0 = time.monotonic()
            os.makedirs(f"{tmp}/{name}")
            cases[name](ringfence, train_mlp, f"{tmp}/{name}")
            print(f"{name}: {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        keep_or_remove(tmp)
    exit_on_failures(f"an unread output cost nothing ({', '.join(chosen)})")


if __name__ == "__main__":
    main()
