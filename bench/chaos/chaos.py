#!/usr/bin/env python3
"""chaos — a seeded chaos soak of ringfence at its DEFAULT settings.

    chaos.py [--build build] [--seed 1] [--minutes 10] [--models mlp,cnn] [--world 4]
             [--deadline 90] [--cases N] [--json OUT] [--keep DIR] [--list] [--exact M]

For the seed it generates cases (bench/chaos/cases.py: injected faults of every kind and
phase, one or two at once or the second during the first one's recovery; SIGSTOP/SIGCONT,
two SIGKILLs at once, a SIGKILL during another worker's recovery, sent by PID) and runs each
through `ringfence run -n W -- recovery_worker --model M` with no timeout shortened. Every
case must
  * end DONE (exit 0) before its deadline, with every worker of the final generation at
    the last step, holding the failure-free run's digest (one reference run per model);
  * pass the audit logs' exactly-once check (tests/ddp/auditlog.py), and every step applied
    anywhere must have the reference's digest of that step;
  * need no recovery when its only faults are slow ranks (a slow rank is no failure);
  * leave no process behind (checked by PID; anything left is killed and the case fails).
With --exact M the workers run in exact mode (M micro-shards, docs/exact.md) and one case in
three is a shrink (`--max-restarts 0 --min-world W-2`: nobody replaced, the survivors go
on): every case, shrinks included, must end on the one failure-free digest, and every step
applied anywhere must have the reference's digest of that step, whatever the world size.
A fault the workers never fired (the summary's not_fired: e.g. a phase=transfer spec in a
rank that was neither source nor receiver) is noted on the case's row, not hidden.
One table row per case; a case past its deadline is killed (its whole process tree) and
fails, with the tail of its output. New cases start until --minutes of wall time are
spent (the references included; the last case may run up to --deadline beyond). The last
lines are the totals and `N passed, M failed`; exit 1 if any case failed, 2 if a
reference run failed (nothing can be judged).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time

from cases import STEPS, describe, disk_errors, make_case, only_slow, piped
from chaoslib import Job, poll_until, signal_each, stop_on_sigterm, tail
from auditlog import exactly_once_problems, step_digests  # (chaoslib put tests/ddp on the path)


def exact_flags(args):
    return ["--micro-shards", str(args.exact)] if args.exact else []


def shrinks(args, case):
    """Exact mode: one case in three (drawn apart from the case itself, so the seed's cases
    stay those of the float soak) lets the job shrink instead of replacing anyone."""
    return bool(args.exact) and random.Random(f"chaos-shrink-{case['seed']}-{case['index']}").random() < 1 / 3


def run_reference(args, model, steps):
    work = tempfile.mkdtemp(prefix=f"chaos-ref-{model}-")
    job = Job(args.build, work, args.world, model, steps, worker_flags=exact_flags(args), deadline_s=args.deadline).start()
    rc = job.wait()
    problems = judge(job, None, None)
    if rc != 0 or problems:
        print(f"chaos: the failure-free {model} run failed (exit {rc}): {'; '.join(problems)}; files in {work}\n"
              f"{tail(job.output())}", file=sys.stderr)
        return None
    ref = {"digest": next(iter(job.finals().values()))[1], "steps": step_digests(job.audits()),
           "wall_s": round(job.wall_s, 2)}
    shutil.rmtree(work, ignore_errors=True)
    return ref


def judge(job, case, ref):
    """What is wrong with a finished job (reference when case is None); [] = it passed."""
    problems = []
    summ = job.summary() or {}
    if job.timed_out:
        problems.append(f"deadline: still running after {job.deadline_s:.0f} s, killed")
    elif job.rc != 0:
        problems.append(f"launcher exit {job.rc}, phase {summ.get('phase')}: {summ.get('error', '')}".rstrip(": "))
    if job.left_running:
        problems.append(f"processes left running after the launcher ended (killed): {job.left_running}")
    finals = job.finals()
    last = [d for s, d in finals.values() if s == job.steps - 1]
    fewest = job.min_world if case and case.get("shrink") else job.world
    if job.rc == 0 and not fewest <= len(last) <= job.world:
        problems.append(f"{len(last)} worker(s) ended at step {job.steps - 1}, expected "
                        f"{job.world if fewest == job.world else f'{fewest} to {job.world}'}: {finals}")
    if len(set(last)) > 1:
        problems.append(f"replicas differ at the end: {sorted(set(last))}")
    audits = job.audits()
    problems += exactly_once_problems(audits)
    if ref:
        if last and last[0] != ref["digest"]:
            problems.append(f"final digest {last[0]} != failure-free {ref['digest']}")
        wrong = sorted(s for s, d in step_digests(audits).items() if ref["steps"].get(s) != d)
        if wrong:
            problems.append(f"{len(wrong)} step(s) differ from the failure-free run's, the first {wrong[0]}")
    if case and only_slow(case) and summ.get("recoveries"):
        problems.append(f"false recovery: {len(summ['recoveries'])} recovery(ies) with only slow ranks, disks or "
                        f"an unread output")
    if case and case.get("ckpt_every"):
        problems += disk_problems(job, case, summ)
    if case and job.rc == 0:
        problems += cost_problems(job, case, summ)
    return problems


# Fault kinds that end or freeze the worker's process: each costs its slot one restart.
PROCESS_ENDING = ("kill", "stop", "hang", "exit")


def cost_problems(job, case, summ):
    """A fault costs what it should, nothing more (docs/launcher.md): only faulty slots are
    evicted or restarted; one restart per fired fault or SIGKILL that ends a process, at most
    one more per SIGSTOP (a short one may end before the lease), none in a shrink case; never
    a whole-job restart or a start from step 0 while members held state."""
    problems = []
    fired = [i for i in summ.get("injected", []) if not i["spec"].startswith(("slow:", "disk:"))]
    faulty = {i["slot"] for i in fired}
    log = getattr(job, "external_log", [])
    for x in case["external"]:
        faulty.update([x["slot"]] if "slot" in x else x.get("slots", []))
    kills = sum(len(re.findall(r"\d+", m.group(1))) for e in log for m in [re.match(r"SIGKILL slots? (\[[^]]*\]|\d+)", e["what"])]
                if m and " pid None" not in e["what"])
    stops = sum(1 for e in log if e["what"].startswith("SIGSTOP slot"))
    least = 0 if case.get("shrink") else sum(i["spec"].split(":")[0] in PROCESS_ENDING for i in fired) + kills
    most = least + (0 if case.get("shrink") else stops)
    restarts = summ.get("restarts")
    if restarts is None or not least <= restarts <= most:
        problems.append(f"{restarts} restart(s), expected {least if least == most else f'{least} to {most}'} "
                        f"(faults fired: {[i['spec'] for i in fired]}, {kills} SIGKILL(s), {stops} SIGSTOP(s))")
    restarted = sorted(w["slot"] for w in summ.get("workers", []) if w.get("restarts"))
    if set(restarted) - faulty:
        problems.append(f"slots restarted {restarted}, faulty {sorted(faulty)}: a healthy slot was restarted")
    evicted = sorted({e["worker"]["slot"] for e in job.events() if e.get("event") == "evict" and e.get("worker")})
    if set(evicted) - faulty:
        problems.append(f"slots evicted {evicted}, faulty {sorted(faulty)}: a healthy slot was evicted")
    if any(r.get("whole_job_restart") for r in summ.get("recoveries", [])):
        problems.append("a whole-job restart while members held state")
    if "started again at step 0" in job.output():
        problems.append("the job started again at step 0")
    return problems


# A writer's failed checkpoints reach the coordinator on its heartbeats (every 100 ms); a
# process that ends soon after the write was struck takes its unsent count with it.
NEWS_WINDOW_US = 1_000_000
ENDS_PROCESS = ("kill:", "exit:", "stop:", "hang:")


def writer_died_with_news(summ):
    """Whether the incarnation the disk fault struck ended by a later fault of its own within
    NEWS_WINDOW_US of the strike: its count may have died unsent (0 is then no problem)."""
    injected = summ.get("injected", [])
    for d in (x for x in injected if x.get("spec", "").startswith("disk:")):
        for e in injected:
            if (e.get("spec", "").startswith(ENDS_PROCESS) and ":for=" not in e["spec"]
                    and (e.get("slot"), e.get("incarnation")) == (d.get("slot"), d.get("incarnation"))
                    and 0 <= e.get("wall_us", 0) - d.get("wall_us", 0) <= NEWS_WINDOW_US):
                return True
    return False


def disk_problems(job, case, summ):
    """A storage case: the failed checkpoints are counted (never more than the faults failed
    writes) and were warnings, the final checkpoint is on disk, no temp file is left."""
    problems = []
    fired = [x["spec"] for x in summ.get("injected", []) if x.get("spec", "").startswith("disk:")]
    failed = summ.get("checkpoints_failed", 0)
    if failed > disk_errors(case):
        problems.append(f"{failed} checkpoint(s) failed, the disk faults failed at most {disk_errors(case)}")
    if fired and disk_errors(case) and failed < 1 and not writer_died_with_news(summ):
        problems.append(f"the disk fault fired ({fired[0]}) but the summary counts no failed checkpoint")
    ck = job.ckpt_dir
    names = sorted(os.listdir(ck)) if os.path.isdir(ck) else []
    final = f"ckpt-{job.steps - 1:09d}.safetensors"
    if job.rc == 0 and final not in names:
        problems.append(f"the final checkpoint {final} is not on disk: {names}")
    if any(n.endswith(".tmp") for n in names):
        problems.append(f"a temp file was left: {names}")
    return problems


def act(job, x, log):
    """Runs one external fault of the case once its step is applied; log gets what was done
    (with wall-clock times: the audit logs' clock)."""
    if x["action"] == "slow_consumer":
        job.read_slowly(x["bytes_per_s"])
        log.append({"what": f"output read at {x['bytes_per_s']} B/s from the start", "wall_us": None})
        return
    if not job.wait_applied(x["step"]):
        log.append({"what": f"never reached step {x['step']}", "wall_us": None})
        return
    if x["action"] == "unread":
        unread(job, x, log)
        return
    slots = [x["slot"]] if x["action"] == "sigstop" else x["slots"]
    pids = [job.worker_pid(s) for s in slots]
    if None in pids:
        log.append({"what": f"slot(s) {slots} not running after step {x['step']}: {pids}", "wall_us": None})
        return
    if x["action"] == "sigstop":
        stop_for(job, x["slot"], pids[0], x["cont_after_s"], log)
    elif x["action"] == "kill_two":
        t = time.time()
        signal_each(pids, signal.SIGSTOP, signal.SIGKILL)  # stopped first: neither acts on the other's death
        log.append({"what": f"SIGKILL slots {slots} pids {pids}", "wall_us": int(t * 1e6)})
    else:
        t = time.time()
        signal_each(pids[:1], signal.SIGKILL)
        log.append({"what": f"SIGKILL slot {slots[0]} pid {pids[0]}", "wall_us": int(t * 1e6)})
        rev = job.wait_event("revoke", int(t * 1e6))
        if rev is None:
            log.append({"what": "no revoke seen: second kill not sent", "wall_us": None})
            return
        pid = job.worker_pid(slots[1])
        t2 = time.time()
        if pid:
            signal_each([pid], signal.SIGKILL)
        running = [e for e in job.events() if e.get("event") == "running" and e.get("g", 0) >= rev.get("g", 0)
                   and e.get("ts_us", 0) <= t2 * 1e6]
        log.append({"what": f"SIGKILL slot {slots[1]} pid {pid} {(t2 * 1e6 - rev['ts_us']) / 1000:.0f} ms after the "
                    f"revoke of g {rev.get('g')}" + (" (that generation already ran)" if running else
                                                     " (during its recovery)"), "wall_us": int(t2 * 1e6)})


def stop_for(job, slot, pid, seconds, log):
    """SIGSTOP pid, then SIGCONT after `seconds` (the fault's duration, a parameter, not a
    synchronisation) unless it was evicted and ended meanwhile; seconds None: never SIGCONT,
    wait until the launcher ended it."""
    t = time.time()
    signal_each([pid], signal.SIGSTOP)  # (signal_each: a process gone meanwhile is skipped)
    log.append({"what": f"SIGSTOP slot {slot} pid {pid}", "wall_us": int(t * 1e6)})
    if seconds is None:
        gone = poll_until(lambda: job.worker_pid(slot) != pid, job.end, job.ended, every_s=0.01)
        log.append({"what": f"no SIGCONT: pid {pid} " + (f"ended {time.time() - t:.1f} s later (evicted)" if gone
                                                          else "still there at the job's end"), "wall_us": None})
        return
    time.sleep(seconds)
    still = job.worker_pid(slot) == pid  # not evicted and SIGKILLed meanwhile
    if still:
        signal_each([pid], signal.SIGCONT)
    log.append({"what": f"SIGCONT pid {pid} after {seconds} s" + ("" if still else " not sent: it was gone (evicted)"),
                "wall_us": int(time.time() * 1e6)})


def unread(job, x, log):
    """Nobody reads the launcher's output for x["for_s"] seconds; with a slot, that worker is
    SIGSTOPped for x["stop_s"] of them."""
    t = time.time()
    job.pause_reading()
    log.append({"what": f"output unread for {x['for_s']} s", "wall_us": None})
    try:
        if "slot" in x:
            pid = job.worker_pid(x["slot"])
            if pid is None:
                log.append({"what": f"slot {x['slot']} not running after step {x['step']}", "wall_us": None})
            else:
                stop_for(job, x["slot"], pid, x["stop_s"], log)
        time.sleep(max(0.0, x["for_s"] - (time.time() - t)))
    finally:
        job.resume_reading()


def to_first_step(job, log):
    """[(fault, seconds)]: for each failure of the case (an inject record of a kind that is
    no slow rank, or a signal sent), in time order, the seconds from it to the first step
    applied by a generation newer than the one that ran then; None where none followed."""
    recs = [x for lines in job.audits().values() for x in lines]
    faults = [(x["ts_us"], x["spec"]) for x in recs if x["event"] == "inject" and not x["spec"].startswith("slow:")]
    faults += [(e["wall_us"], e["what"]) for e in log if e["wall_us"] is not None and not e["what"].startswith("SIGCONT")]
    out = []
    for t0, what in sorted(faults):
        g0 = max([x["g"] for x in recs if x["event"] in ("apply", "inject") and x["ts_us"] <= t0], default=0)
        after = [x["ts_us"] for x in recs if x["event"] == "apply" and x["g"] > g0 and x["ts_us"] > t0]
        out.append((what, round((min(after) - t0) / 1e6, 3) if after else None))
    return out


def shown_first_step(times):
    """The table's figure: a hang's if the case has one (the failure this soak is about), else
    the first failure's."""
    hangs = [t for what, t in times if what.startswith("hang:")]
    return hangs[0] if hangs else (times[0][1] if times else None)


def run_case(args, case, ref):
    work = tempfile.mkdtemp(prefix=f"chaos-s{case['seed']}-c{case['index']}-")
    # A storage case's checkpoints go to /dev/shm where there is one: a fast disk, so the
    # writer (which defers a periodic checkpoint while it writes) is free when the fault's
    # step comes, and the fault strikes a periodic checkpoint, not the final one.
    ck = (tempfile.mkdtemp(prefix="chaos-ckpt-", dir="/dev/shm" if os.path.isdir("/dev/shm") else work)
          if case.get("ckpt_every") else None)
    flags = ["--ckpt-dir", ck, "--ckpt-every", str(case["ckpt_every"])] if ck else []
    launcher = ["--max-restarts", "0", "--min-world", str(max(1, args.world - 2))] if case.get("shrink") else []
    job = Job(args.build, work, args.world, case["model"], case["steps"], case["inject"],
              worker_flags=flags + exact_flags(args), launcher_flags=launcher, deadline_s=args.deadline).start(piped(case))
    job.ckpt_dir = ck
    log = job.external_log = []
    try:
        for x in case["external"]:
            act(job, x, log)
        job.wait()
    finally:
        job.stop()  # also on an error or ^C here: nothing of the job outlives the case
    try:
        summ = job.summary() or {}
        problems = judge(job, case, ref)
    finally:
        if ck:
            shutil.rmtree(ck, ignore_errors=True)
    row = {**case, "faults": ("shrink, " if case.get("shrink") else "") + describe(case), "passed": not problems, "problems": problems,
           "wall_s": round(job.wall_s, 2), "recoveries": len(summ["recoveries"]) if "recoveries" in summ else None,
           "to_first_step": to_first_step(job, log), "external_log": log,
           "not_fired": [f"{x['spec']} ({x['reason']})" for x in summ.get("not_fired", [])],
           "exit_status": job.rc}
    if problems:
        row["output_tail"] = tail(job.output())
        kept = os.path.join(args.keep, os.path.basename(work)) if args.keep else work
        if args.keep:
            shutil.copytree(work, kept, dirs_exist_ok=True)
            shutil.rmtree(work, ignore_errors=True)
        row["files"] = kept
    else:
        shutil.rmtree(work, ignore_errors=True)
    return row


def print_row(r):
    rec = "-" if r["recoveries"] is None else str(r["recoveries"])
    shown = shown_first_step(r["to_first_step"])
    first = "-" if shown is None else f"{shown:.2f}"
    print(f"{r['seed']:>4} {r['index']:>4} {r['model']:5} {'pass' if r['passed'] else 'FAIL':6} {r['wall_s']:7.1f} "
          f"{rec:>5} {first:>9}   {r['faults']}", flush=True)
    for e in r["external_log"]:
        print(f"{'':38}- {e['what']}", flush=True)
    for nf in r["not_fired"]:
        print(f"{'':38}note: never fired: {nf}", flush=True)
    for p in r["problems"]:
        print(f"{'':38}why: {p}", flush=True)
    if not r["passed"]:
        print(f"{'':38}files: {r['files']} (output.txt; its tail is in --json)", flush=True)


def main():
    ap = argparse.ArgumentParser(description="seeded chaos soak at default settings (bench/chaos)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=10.0, help="wall budget: no new case starts after it")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--deadline", type=float, default=90.0, help="seconds per job before it is killed and fails")
    ap.add_argument("--cases", type=int, help="at most this many cases")
    ap.add_argument("--only", help="run only these case numbers of the seed (e.g. 9,12: to reproduce a failure)")
    ap.add_argument("--json", help="write every case, reference and total here")
    ap.add_argument("--keep", help="copy failed cases' files into this folder (default: left in their temp folder)")
    ap.add_argument("--list", action="store_true", help="print the seed's cases (--cases, default 20) and exit")
    ap.add_argument("--exact", type=int, default=0, metavar="M",
                    help="exact mode with M micro-shards, one case in three a shrink (default 0: the float sum)")
    args = ap.parse_args()
    stop_on_sigterm()
    models = args.models.split(",")
    bad = [m for m in models if m not in ("mlp", "cnn")]
    if args.only and not all(x.isdigit() for x in args.only.split(",")):
        ap.error(f"--only takes case numbers separated by commas, not '{args.only}'")
    if bad or args.world < 2 or args.minutes <= 0 or args.deadline <= 0:
        ap.error(f"--models takes mlp and/or cnn (not {bad}), --world >= 2, --minutes and --deadline > 0")
    if args.list:
        for i in range(args.cases or 20):
            c = make_case(args.seed, i, models, args.world)
            print(f"{args.seed:>4} {i:>4} {c['model']:5} {describe(c)}")
        return 0
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    t_start = time.monotonic()
    print(f"# chaos: seed {args.seed}, budget {args.minutes:g} min, models {args.models}, W {args.world}, default "
          f"timeouts, deadline {args.deadline:g} s per case"
          f"{f', exact mode with {args.exact} micro-shards (one case in three a shrink)' if args.exact else ''}",
          flush=True)
    refs = {}
    for m in models:
        steps = STEPS[m]
        refs[m] = run_reference(args, m, steps)
        if refs[m] is None:
            return 2
        print(f"# reference {m}: {steps} steps, digest {refs[m]['digest']}, {refs[m]['wall_s']:.1f} s", flush=True)
    print(f"{'seed':>4} {'case':>4} {'model':5} {'result':6} {'wall s':>7} {'recov':>5} {'1st step':>9}   faults "
          f"(1st step: s from the hang, else the first failure, to the first step of a newer generation)", flush=True)
    rows = []
    numbers = [int(x) for x in args.only.split(",")] if args.only else None
    while not rows or (time.monotonic() - t_start < args.minutes * 60 and (args.cases is None or len(rows) < args.cases)):
        if numbers is not None and len(rows) == len(numbers):
            break
        case = make_case(args.seed, numbers[len(rows)] if numbers else len(rows), models, args.world)
        case["shrink"] = shrinks(args, case)
        rows.append(run_case(args, case, refs[case["model"]]))
        print_row(rows[-1])
    passed = sum(r["passed"] for r in rows)
    recoveries = sum(r["recoveries"] or 0 for r in rows)
    print(f"cases {len(rows)}, recoveries {recoveries}, wall {time.monotonic() - t_start:.0f} s")
    print(f"{passed} passed, {len(rows) - passed} failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "minutes": args.minutes, "models": models, "world": args.world,
                       "exact_micro_shards": args.exact,
                       "deadline_s": args.deadline, "references": refs, "cases": rows, "passed": passed,
                       "failed": len(rows) - passed, "recoveries": recoveries}, f, indent=1)
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
