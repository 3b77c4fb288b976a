"""Process helpers shared by the ddp tests and bench/recovery (one copy, imported by both)."""
import os
import signal
import time


def procs_mentioning(text):
    """PIDs of processes whose command line contains text (a test's unique temp dir: every
    worker of a job gets it in --result-dir / --audit-dir, so this finds them all, and
    nobody else's)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(d))
        except OSError:
            pass  # it exited while we looked
    return pids


def kill_job(launcher, text):
    """SIGKILLs a whole job: the launcher's process group and every worker whose command
    line mentions text (workers run in their own process groups), then reaps the launcher.
    Returns the time of the kill (time.time())."""
    victims = procs_mentioning(text)
    t_kill = time.time()
    os.killpg(launcher.pid, signal.SIGKILL)
    signal_each(victims, signal.SIGKILL)
    launcher.wait()
    return t_kill


def kill_workers(launcher, text):
    """SIGKILLs every worker of a job (every process whose command line mentions text) but
    not its launcher. All are SIGSTOPped first, so none can act on another's death (report
    its state to a new round) between the kills. Returns (time of the kill: time.time()
    before the first SIGSTOP, how many workers were killed)."""
    victims = [pid for pid in procs_mentioning(text) if pid != launcher.pid]
    t_kill = time.time()
    signal_each(victims, signal.SIGSTOP, signal.SIGKILL)
    return t_kill, len(victims)


def signal_each(pids, *sigs):
    """Sends each signal to every pid, one signal at a time; a pid already gone is skipped."""
    for sig in sigs:
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
