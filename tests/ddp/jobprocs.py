"""Process helpers shared by the ddp tests and bench/recovery (one copy, imported by both)."""
import os


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
