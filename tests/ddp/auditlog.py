"""Reading the workers' audit logs (ddp/audit_log.h) and checking that every step was applied
exactly once: shared by tests/ddp/fault_test.py, bench/recovery and bench/chaos."""
import glob
import json
import os


def records(path):
    """Every complete record of one audit log. It may be read while its worker appends (or
    after the worker was killed mid-line): what follows the last newline of one read is not
    a record yet. (Iterating the file's lines instead can return a record's head at one end
    of the file and, the writer having appended meanwhile, its tail as the next line.)"""
    with open(path) as f:
        text = f.read()
    return [json.loads(x) for x in text[:text.rfind("\n") + 1].split("\n") if x.strip()]


def read_audits(aud, files="audit-*.jsonl"):
    """{file name: its records} for the logs in aud whose names match files
    (audit-slotS-incI.jsonl: one per slot and incarnation), in name order."""
    return {os.path.basename(f): records(f) for f in sorted(glob.glob(os.path.join(aud, files)))}


def exactly_once_problems(audits):
    """What breaks "each step applied exactly once on every lineage" (docs/protocol.md) in
    {file: records}: within one worker, applied steps follow its last state (start -1,
    transfer T, resume from disk, apply s) by exactly one; and every application (or
    transfer, or restore) of a step s anywhere has the same digest. Returns the problems,
    one text each, naming the file and step; [] when there is none."""
    problems = []
    step_digest = {}
    for fname, lines in audits.items():
        cur = None
        for ln in lines:
            ev, s = ln["event"], ln["s"]
            if ev == "start":
                if not (cur is None or cur == -1):
                    problems.append(f"{fname}: fresh start after applying {cur}")
                cur = -1
            elif ev == "resume":  # a whole-job restart from disk: a new lineage begins
                cur = s
            elif ev == "transfer":
                if not (cur is None or s >= cur):
                    problems.append(f"{fname}: transfer to older step {s} after {cur}")
                cur = s
            elif ev == "apply":
                if not (cur is not None and s == cur + 1):
                    problems.append(f"{fname}: applied step {s} after state {cur}")
                cur = s
            if ev in ("apply", "transfer") or (ev == "resume" and s >= 0):
                d = step_digest.setdefault(s, ln["digest"])
                if d != ln["digest"]:
                    problems.append(f"step {s} has two digests: {d} and {ln['digest']}")
    return problems


def step_digests(audits):
    """{step: digest} of every applied step (a run's lineage; exactly_once_problems checks
    that each step has one digest)."""
    return {ln["s"]: ln["digest"] for lines in audits.values() for ln in lines if ln["event"] == "apply"}
