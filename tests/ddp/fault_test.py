#!/usr/bin/env python3
"""Multi-process fault tests of the resilient trainer, through `ringfence run`.

    fault_test.py RINGFENCE DDP_WORKER SCENARIO

Each scenario first runs the same job without faults (the reference), then with its
faults, and checks what docs/protocol.md promises:
  * the job finishes (exit 0, phase DONE) with every worker at the last step;
  * every replica ends bitwise identical (same state digest);
  * replace mode (same W): the final digest equals the failure-free run's;
    shrink mode: same steps, final loss within 1 % of the failure-free run's (exact mode,
    --micro-shards: the failure-free digest);
  * the audit logs show every step applied exactly once on every lineage: within one
    worker, applied steps follow its last state (start -1, transfer T, apply s) by exactly
    one, and every application of a step s anywhere has the same digest;
  * the launcher's summary lists the expected recoveries with their phase timings;
  * (scenarios with "blame": the killed rank) what the survivors print, report to the
    coordinator and leave in their flight records names no live rank as failed: a rank
    that only aborted because its generation was revoked is nobody's culprit.
The whole test has one deadline (BUDGET_S, below its ctest TIMEOUT of 120 s) shared by its
runs; on expiry the launcher's process group is killed (its workers die with it by
PDEATHSIG), the tail of its output is printed and the test fails.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from auditlog import exactly_once_problems  # noqa: E402  (shared with bench/chaos)
from jobprocs import kill_job, kill_workers, procs_mentioning  # noqa: E402  (shared with bench/recovery)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rf_testlib import read_jsonl  # noqa: E402

STEPS = 40
W = 3
BUDGET_S = 105  # the ctest TIMEOUT is 120 s: a hang fails here, with diagnostics
T_END = time.monotonic() + BUDGET_S


def left_s():
    return max(1.0, T_END - time.monotonic())
KILL_MID = "kill:rank=1:step=20:phase=allreduce:after_chunks=1"

# name: (launcher flags, worker flags, checks)
SCENARIOS = {
    "clean": ([], ["--verify-every", "5"], {"recoveries": 0}),
    "kill_middle_allreduce": (["--inject", KILL_MID], [], {"recoveries": 1}),
    "kill_rank0_backward": (["--inject", "kill:rank=0:step=15:phase=backward"], [], {"recoveries": 1}),
    "sigstop_middle": (["--inject", "stop:rank=1:step=12:phase=forward", "--lease", "500ms"], [],
                       {"recoveries": 1}),
    "sigstop_middle_defaults": (["--inject", "stop:rank=1:step=12:phase=forward"], [],
                                {"recoveries": 1, "cause": "lease_expired", "hang_s": 5}),
    "shrink_kill_middle": (["--inject", KILL_MID, "--max-restarts", "0", "--min-world", "2", "--join-window", "300ms"], [],
                           {"recoveries": 1, "shrink": True}),
    "exit_optimizer": (["--inject", "exit:rank=2:step=10:phase=optimizer"], [], {"recoveries": 1}),
    "drop_allreduce": (["--inject", "drop:rank=1:step=18:phase=allreduce:after_chunks=1"], [],
                       {"recoveries": 1}),
    "two_failures": (["--inject", "kill:rank=1:step=10:phase=forward",
                      "--inject", "kill:rank=2:step=25:phase=allreduce:after_chunks=1"], [],
                     {"recoveries": 2}),
    "kill_during_transfer": (["--inject", KILL_MID, "--inject", "kill:rank=0:step=20:phase=transfer"], [],
                             {"recoveries": 1, "min_rounds": 2}),
    # A hung training thread (its heartbeat thread still alive), at default settings: its
    # heartbeats say it has been computing past its stall bound (learned from its step
    # times, at least 1 s), the coordinator evicts it (cause hung), the launcher SIGKILLs
    # and replaces it; "hang_s" bounds the time from the hang to the new generation.
    "hang_forward": (["--inject", "hang:rank=1:step=15:phase=forward"], [],
                     {"recoveries": 1, "cause": "hung", "hang_s": 5}),
    # Hung inside the communicator's chunk hook: the peers' D3 (1.5 bounds) revokes the
    # generation, and the hung rank, still inside its collective past two bounds, is evicted
    # as wedged (it could not answer the revocation).
    "hang_allreduce": (["--inject", "hang:rank=2:step=15:phase=allreduce:after_chunks=1"], [],
                       {"recoveries": 1, "hang_s": 8}),
    # The same before the all-reduce starts (buckets already in flight): hung.
    "hang_allreduce_start": (["--inject", "hang:rank=0:step=19:phase=allreduce"], [],
                             {"recoveries": 1, "cause": "hung", "hang_s": 5}),
    # Every process of the job frozen at once for 2.5 s (a host pausing the VM; a debugger),
    # past the 1 s stall bound but within the lease (5 s here: at the default 1 s lease a
    # freeze past the bound is also past the lease, and the lease decides): no failure.
    # Each process is continued by its own helper child 2.5 s after it stopped; the freeze
    # must cost nothing: no eviction (a frozen worker is not hung), no recovery, no restart.
    "freeze_all_forward": ([*[a for r in range(3) for a in ("--inject", f"stop:rank={r}:step=12:phase=forward:for=2.5")],
                            "--lease", "5s"], [], {"recoveries": 0}),
    "sigstop_rank0": (["--inject", "stop:rank=0:step=8:phase=backward", "--lease", "500ms"], [], {"recoveries": 1}),
    "sigstop_rank0_defaults": (["--inject", "stop:rank=0:step=8:phase=backward"], [],
                               {"recoveries": 1, "cause": "lease_expired", "hang_s": 5}),
    "kill_during_recovery": (["--inject", KILL_MID, "--inject", "kill:rank=2:step=20:phase=recovery"], [],
                             {"recoveries": 1, "min_rounds": 2}),
    "exit_backward_rank0": (["--inject", "exit:rank=0:step=5:phase=backward"], [], {"recoveries": 1}),
    "drop_rank0": (["--inject", "drop:rank=0:step=30:phase=allreduce:after_chunks=1"], [], {"recoveries": 1}),
    # The replacement comes after the join window: shrink to 2, then grow back to 3 at a
    # step boundary (reconfigure flag in the control block, R5). No time margins: the
    # replacement joins only once the event log shows the shrunk generation (world 2)
    # running, and the survivors hold after their first step in it until the reconfigure
    # flag has reached them, so the grow lands at the next step whatever the machine's load.
    # (Fault-run-only worker flags: "{events}" is the run's event log.)
    "shrink_then_grow": (["--inject", "kill:rank=1:step=10:phase=forward", "--join-window", "300ms",
                          "--min-world", "2"], [],
                         {"recoveries": 2, "shrink": True, "grow": True,
                          "fault_worker_flags": ["--replacement-waits-for-world", "2", "--event-log", "{events}",
                                                 "--hold-shrunk-until-grow"]}),
    "spare_replaces": (["--inject", KILL_MID, "--max-restarts", "0", "--spares", "1"], [], {"recoveries": 1}),
    # A second failure while the first one's restart is held (the spare took the hole, the
    # dead slot restarts only after the recovery, apps/ringfence): the source dies in the
    # transfer to the spare; no spare is left, so slot 0 restarts at once and the round is
    # redone; slot 1's restart starts after the recovery completed.
    "spare_kill_during_transfer": (["--inject", KILL_MID, "--inject", "kill:rank=0:step=20:phase=transfer",
                                    "--spares", "1"], [], {"recoveries": 1, "min_rounds": 2, "held": (1, 0)}),
    # A replica silently corrupted after step 12: --verify-every 5 must stop the job at
    # step 14 with an error naming the digests, never finish on diverged replicas.
    "divergence_detected": ([], ["--verify-every", "5", "--corrupt-at", "12"], {"diverge": True}),
    # Rank 0 freezes (SIGSTOP) before step 23, so the job cannot pass step 22; then the
    # launcher and every worker are SIGKILLed, and the job is run again with --resume: it
    # continues from the newest checkpoint on disk (every 5 steps) and ends bitwise equal
    # to the uninterrupted run.
    "whole_job_resume": ([], [], {"whole_job": True}),
    # The same failure under a launcher that lives on, and without --resume: rank 0 freezes
    # before step 23, then every worker is SIGKILLed (the launcher is not). The launcher
    # restarts them all; their plan is a fresh start in a job that already ran, so each
    # restores the job's newest checkpoint (its job id in the metadata) and a new round
    # plans from it: the job ends DONE, bitwise equal to the uninterrupted run.
    "whole_job_restart": ([], [], {"whole_job": "restart"}),
    "kill_optimizer_rank0": (["--inject", "kill:rank=0:step=17:phase=optimizer"], [], {"recoveries": 1}),
    # The demo's failure at W = 4: rank 2 SIGKILLed mid-all-reduce. Whichever survivor
    # hears of it first (its endpoint error, or the coordinator's revocation — then it
    # aborts and its farewell tells the others), every survivor's line, report and flight
    # record names rank 2 or nobody (aborted, relayed), never a survivor.
    "kill_blame_w4": (["--inject", "kill:rank=2:step=20:phase=allreduce:after_chunks=1"], [],
                      {"recoveries": 1, "world": 4, "blame": 2}),
    "stop_allreduce": (["--inject", "stop:rank=2:step=14:phase=allreduce:after_chunks=1", "--lease", "500ms"], [],
                       {"recoveries": 1}),
    "stop_allreduce_defaults": (["--inject", "stop:rank=2:step=14:phase=allreduce:after_chunks=1"], [],
                                {"recoveries": 1, "cause": "lease_expired", "hang_s": 5}),
    # rank 0, the source of the replacement's state, freezes in the transfer: D2 revokes
    # g+1 into g+2, and slot 2 becomes the source.
    "stop_during_transfer": (["--inject", KILL_MID, "--inject", "stop:rank=0:step=20:phase=transfer",
                              "--lease", "500ms"], [], {"recoveries": 1, "min_rounds": 2}),
    "stop_during_transfer_defaults": (["--inject", KILL_MID, "--inject", "stop:rank=0:step=20:phase=transfer"], [],
                                      {"recoveries": 1, "min_rounds": 2}),
    "drop_backward": (["--inject", "drop:rank=2:step=8:phase=backward"], [], {"recoveries": 1}),
    "drop_optimizer_rank0": (["--inject", "drop:rank=0:step=12:phase=optimizer"], [], {"recoveries": 1}),
    "hang_optimizer_rank0": (["--inject", "hang:rank=0:step=15:phase=optimizer"], [],
                             {"recoveries": 1, "cause": "hung", "hang_s": 5}),
    # A slow rank (200 ms inside its all-reduce, far below the stall timeout) is not a
    # failure: no recovery, same result.
    "slow_allreduce": (["--inject", "slow:rank=1:step=10:phase=allreduce:after_chunks=1"], [], {"recoveries": 0}),
    # The fault matrix (kill, SIGSTOP, hang, drop x forward, backward, mid-all-reduce,
    # optimizer, transfer), and a clean exit during the transfer.
    "stop_optimizer": (["--inject", "stop:rank=1:step=14:phase=optimizer", "--lease", "500ms"], [],
                       {"recoveries": 1}),
    "stop_optimizer_defaults": (["--inject", "stop:rank=1:step=14:phase=optimizer"], [],
                                {"recoveries": 1, "cause": "lease_expired", "hang_s": 5}),
    "hang_backward": (["--inject", "hang:rank=1:step=12:phase=backward"], [],
                      {"recoveries": 1, "cause": "hung", "hang_s": 5}),
    "drop_forward": (["--inject", "drop:rank=1:step=16:phase=forward"], [], {"recoveries": 1}),
    # A second failure during the recovery from the first: rank 0, the source of the
    # replacement's state, fails in the transfer; g+1 is revoked into g+2. Hung there, it
    # is judged against its recovery bound (the state's size, at least 1 s).
    "hang_during_transfer": (["--inject", KILL_MID, "--inject", "hang:rank=0:step=20:phase=transfer"], [],
                             {"recoveries": 1, "min_rounds": 2, "hang_s": 6}),
    # Hung before connecting in the recovery (its peers wait for its address): hung.
    "hang_during_recovery": (["--inject", KILL_MID, "--inject", "hang:rank=2:step=20:phase=recovery"], [],
                             {"recoveries": 1, "min_rounds": 2, "hang_s": 6}),
    "drop_during_transfer": (["--inject", KILL_MID, "--inject", "drop:rank=0:step=20:phase=transfer"], [],
                             {"recoveries": 1, "min_rounds": 2}),
    "exit_during_transfer": (["--inject", KILL_MID, "--inject", "exit:rank=0:step=20:phase=transfer"], [],
                             {"recoveries": 1, "min_rounds": 2}),
    # Graceful stop (docs/protocol.md "Planned changes"): the launcher gets SIGINT / SIGTERM once
    # step 15 is applied (every rank holds there until the stop flag has reached it, so the
    # flag rides in step 16's control block on every rank): exit 0, every replica at step
    # 16 with one digest, a checkpoint of step 16; then --resume runs to the end, bitwise
    # equal to the uninterrupted run.
    # The overlap A/B of ddp_bench (overlap on 3 steps, off 3, ...; several buckets) is
    # the same computation: no recovery, final digest == the run with overlap always on.
    "overlap_ab": ([], ["--bucket-kib", "4"], {"recoveries": 0, "fault_worker_flags": ["--overlap-ab", "3"]}),
    "graceful_stop_sigint": ([], [], {"graceful": signal.SIGINT}),
    # Exact mode (docs/exact.md): 6 micro-shards, so W = 3 and W = 2 compute the same
    # shards; a shrink (and a shrink then a grow back) ends bitwise equal to the failure-free
    # run, not merely close; a hang at default settings and a kill mid-all-reduce (of the
    # integers) likewise.
    "exact_shrink_kill_middle": (["--inject", KILL_MID, "--max-restarts", "0", "--min-world", "2",
                                  "--join-window", "300ms"], ["--micro-shards", "6"],
                                 {"recoveries": 1, "shrink": True, "exact": True}),
    "exact_shrink_then_grow": (["--inject", "kill:rank=1:step=10:phase=forward", "--join-window", "300ms",
                                "--min-world", "2"], ["--micro-shards", "6"],
                               {"recoveries": 2, "shrink": True, "grow": True, "exact": True,
                                "fault_worker_flags": ["--replacement-waits-for-world", "2", "--event-log", "{events}",
                                                       "--hold-shrunk-until-grow"]}),
    "exact_hang_backward": (["--inject", "hang:rank=1:step=12:phase=backward"], ["--micro-shards", "6"],
                            {"recoveries": 1, "cause": "hung", "hang_s": 5}),
    "exact_kill_middle_allreduce": (["--inject", KILL_MID], ["--micro-shards", "6"], {"recoveries": 1}),
    "graceful_stop_sigterm": ([], [], {"graceful": signal.SIGTERM}),
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


CKPT_FILE = re.compile(r"ckpt-(\d+)\.safetensors$")


def newest_checkpoint(ckpt_dir):
    """The step of the newest checkpoint written whole in ckpt_dir (a file being written is a
    hidden .tmp), or None."""
    steps = [int(m.group(1)) for f in (os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else [])
             if (m := CKPT_FILE.match(f))]
    return max(steps, default=None)


def frozen_with_checkpoint(aud, ckpt_dir):
    """Rank 1 froze (its inject line) and rank 0, the checkpoint writer, has one on disk."""
    frozen = any('"inject"' in l for f in glob.glob(os.path.join(aud, "audit-*.jsonl")) for l in open(f))
    return frozen and newest_checkpoint(ckpt_dir) is not None


def kill_whole_job(work, ringfence, worker, launcher_flags, worker_flags, at_step, ckpt_dir):
    """Starts the job with rank 1 set to SIGSTOP itself before step at_step + 1, waits (by
    polling the audit logs and the checkpoint directory) until it did and a checkpoint is on
    disk, then SIGKILLs the launcher's process group and every worker, and waits until all
    are gone. Rank 1, not rank 0: rank 0 writes the checkpoints, and a frozen rank 0 would
    freeze its writer too. Returns the newest checkpoint's step on disk once all are gone."""
    res, aud = os.path.join(work, "res"), os.path.join(work, "aud")
    os.makedirs(res, exist_ok=True)
    os.makedirs(aud, exist_ok=True)
    cmd = [ringfence, "run", "-n", str(W), *launcher_flags, "--inject", f"stop:rank=1:step={at_step + 1}:phase=forward",
           "--", worker, "--result-dir", res, "--audit-dir", aud,
           "--steps", str(STEPS), *worker_flags]
    out = open(os.path.join(work, "output-killed.txt"), "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    t_end = T_END
    ready = False
    while time.monotonic() < t_end and not ready and p.poll() is None:
        ready = frozen_with_checkpoint(aud, ckpt_dir)
        time.sleep(0.002)  # polling files for a condition, not a timed wait for one
    kill_job(p, work)
    out.close()
    while procs_mentioning(work) and time.monotonic() < t_end + 5:
        time.sleep(0.002)
    check(not procs_mentioning(work), "whole-job kill: processes survived")
    check(ready, f"whole-job kill: rank 1 never froze before step {at_step + 1} with a checkpoint on disk")
    return newest_checkpoint(ckpt_dir)


def kill_every_worker_at_freeze(p, aud, ckpt_dir):
    """(run_job's `during`) Once rank 1 froze and a checkpoint is on disk, SIGKILLs every
    worker but not the launcher (jobprocs.kill_workers). Returns (how many workers were
    killed, the newest checkpoint's step on disk right after the kill: what a whole-job
    restart must resume from; the restarted workers write none before they trained past it)."""
    while p.poll() is None and time.monotonic() < T_END:
        if frozen_with_checkpoint(aud, ckpt_dir):
            break
        time.sleep(0.002)  # polling files for a condition, not a timed wait for one
    killed = kill_workers(p, os.path.dirname(aud))[1]
    return killed, newest_checkpoint(ckpt_dir)


def run_job(ringfence, worker, work, launcher_flags, worker_flags, during=None):
    """Runs the job to its end (or the test's deadline). during(popen, audit_dir), if
    given, runs while the job does (e.g. to signal the launcher on a condition)."""
    res, aud = os.path.join(work, "res"), os.path.join(work, "aud")
    os.makedirs(res, exist_ok=True)
    os.makedirs(aud, exist_ok=True)
    summary = os.path.join(work, "summary.json")
    events = os.path.join(work, "events.jsonl")
    worker_flags = [f.replace("{events}", events) for f in worker_flags]
    cmd = [ringfence, "run", "-n", str(W), "--summary", summary, "--event-log", events,
           *launcher_flags, "--", worker, "--result-dir", res, "--audit-dir", aud, "--steps", str(STEPS),
           *worker_flags]  # a --steps in worker_flags comes later and wins
    with open(os.path.join(work, "output.txt"), "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if during:
                during(p, aud)
            rc = p.wait(timeout=left_s())
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
    if rc is None:
        check(False, f"deadline: the job in {work} was still running after the test's {BUDGET_S} s")
        with open(os.path.join(work, "output.txt"), errors="replace") as fh:
            print("---- launcher output (tail) ----\n" + "".join(fh.readlines()[-40:]), flush=True)
    results = {}
    for f in glob.glob(os.path.join(res, "result-*.json")):
        with open(f) as fh:
            results[os.path.basename(f)] = json.load(fh)
    audits = {}
    for f in sorted(glob.glob(os.path.join(aud, "audit-*.jsonl"))):
        with open(f) as fh:
            audits[os.path.basename(f)] = [json.loads(line) for line in fh if line.strip()]
    summ = None
    if os.path.exists(summary):
        with open(summary) as fh:
            summ = json.load(fh)
    return rc, results, audits, summ


def check_job(name, rc, results, audits, summ, work):
    check(rc == 0, f"{name}: launcher exit {rc} (see {work}/output.txt)")
    check(summ is not None and summ.get("phase") == "DONE", f"{name}: job not DONE: {summ and summ.get('phase')}")
    finals = [r for r in results.values() if not r["standby"]]
    check(len(finals) >= 1, f"{name}: no worker result")
    check(all(r["step"] == STEPS - 1 for r in finals), f"{name}: not every worker reached step {STEPS - 1}")
    digests = {r["digest"] for r in finals}
    check(len(digests) == 1, f"{name}: replicas differ at the end: {digests}")
    # Exactly once per lineage, and one digest per step everywhere.
    for problem in exactly_once_problems(audits):
        check(False, f"{name}: {problem}")
    return finals


# Fault kinds that end or freeze the worker's process for good: each costs its slot one
# restart (a stop with for= is a freeze that ends: none).
PROCESS_ENDING = ("kill", "stop", "hang", "exit")


def check_cost(name, launcher_flags, summ, work):
    """Each fault costs exactly what it should (docs/launcher.md): the slots evicted are
    faulty ones, one restart per fired fault that ends or freezes a process (none under
    --max-restarts 0), no other slot restarted, never a whole-job restart or a start from
    step 0 while members held state."""
    summ = summ or {}
    fired = summ.get("injected", [])
    faulty = {(i["slot"], i["incarnation"]) for i in fired}
    ending = [i for i in fired if i["spec"].split(":")[0] in PROCESS_ENDING and ":for=" not in i["spec"]]
    no_restarts = "--max-restarts" in launcher_flags and launcher_flags[launcher_flags.index("--max-restarts") + 1] == "0"
    want = 0 if no_restarts else len(ending)
    check(summ.get("restarts") == want, f"{name}: {summ.get('restarts')} restart(s), expected {want} "
          f"(one per fired fault that ends a process: {[i['spec'] for i in ending]})")
    restarted = {w["slot"] for w in summ.get("workers", []) if w.get("restarts")}
    check(restarted <= {slot for slot, _ in faulty}, f"{name}: slots restarted {sorted(restarted)}, faulty "
          f"{sorted(faulty)}: a survivor was restarted")
    events = read_jsonl(os.path.join(work, "events.jsonl"))  # none when the launcher never started
    evicted = {(e["worker"]["slot"], e["worker"]["incarnation"]) for e in events if e.get("event") == "evict"}
    check(evicted <= faulty, f"{name}: evicted {sorted(evicted)}, faulty {sorted(faulty)}: a survivor was evicted")
    check(not any(r.get("whole_job_restart") for r in summ.get("recoveries", [])), f"{name}: a whole-job restart")
    with open(os.path.join(work, "output.txt"), errors="replace") as fh:
        check("started again at step 0" not in fh.read(), f"{name}: the job started again at step 0")


# base/log.h's line: "ringfence [slot/rank gG sS] warn worker: step 18 not applied: rank 1: ..."
NOT_APPLIED = re.compile(r"ringfence \[(\d+)/(\d+) g[-\d]+ s[-\d]+\] warn worker: step (\d+) not applied: rank \d+: "
                         r".*? g=(\d+) .*?: (.*)$")
PEER_FAILED = re.compile(r"\bpeer (\d+) failed\b")


def check_blame(name, work, victim):
    """Generation 1 ends because rank `victim` was killed: no survivor may name another
    rank as failed — not in its "not applied" line, its failure report to the coordinator
    (event log) or its flight records."""
    blamed, lines = [], 0
    with open(os.path.join(work, "output.txt"), errors="replace") as fh:
        for ln in fh:
            m = NOT_APPLIED.search(ln)
            if not m or m.group(4) != "1":
                continue
            lines += 1
            summary = m.group(5)
            named = [int(p) for p in PEER_FAILED.findall(summary)]
            ok = summary.startswith("aborted (") or (named and all(p == victim for p in named))
            if not ok or any(p != victim for p in named):
                blamed.append(ln.strip())
    check(lines >= 1, f"{name}: no survivor printed a 'not applied' line for generation 1")
    check(not blamed, f"{name}: survivors name a live rank as failed (only rank {victim} died): {blamed}")
    with open(os.path.join(work, "events.jsonl")) as fh:
        events = [json.loads(x) for x in fh if x.strip()]
    reports = [e for e in events if "failure_report" in (e.get("event", ""), e.get("cause", ""))]
    wrong = [e for e in reports if any(int(p) != victim for p in PEER_FAILED.findall(e.get("detail", "")))]
    check(not wrong, f"{name}: failure reports name a live rank as failed: {wrong}")
    bad_records, failed_records = [], 0
    for f in glob.glob(os.path.join(work, "aud", "flight-*.jsonl")):
        with open(f, errors="replace") as fh:
            for x in fh:
                try:
                    rec = json.loads(x)
                except ValueError:
                    continue
                if rec.get("generation") != 1 or rec.get("state") != "failed":
                    continue
                failed_records += 1
                if rec.get("peer", -1) not in (-1, victim):
                    bad_records.append(rec)
    check(failed_records >= 1, f"{name}: no survivor's flight record of generation 1 failed")
    check(not bad_records, f"{name}: flight records name a live rank as failed: {bad_records}")
    print(f"{name}: {lines} survivor lines, {len(reports)} failure reports; none names a live rank")


def graceful_stop(ringfence, worker, tmp, name, sig, worker_flags, hold=15):
    """Stop by signal at a known step, then --resume to the end (see the scenarios)."""
    ref_dir = os.path.join(tmp, "reference")
    os.makedirs(ref_dir)
    rc, results, audits, summ = run_job(ringfence, worker, ref_dir, [], worker_flags)
    ref = check_job(f"{name}/reference", rc, results, audits, summ, ref_dir)
    ck = os.path.join(tmp, "ckpt")
    stopped_dir = os.path.join(tmp, "stopped")
    os.makedirs(stopped_dir)
    signalled = []

    def signal_at_hold(p, aud):
        # Every rank holds after applying `hold` until the stop flag reached it, so once rank
        # 0 applied it the job cannot get past hold + 1 without the stop.
        while p.poll() is None and time.monotonic() < T_END:
            for f in glob.glob(os.path.join(aud, "audit-*.jsonl")):
                with open(f) as fh:
                    if any(f'"s":{hold},' in l and '"event":"apply"' in l and '"rank":0,' in l for l in fh):
                        os.kill(p.pid, sig)  # the launcher alone (its workers have their own groups)
                        signalled.append(time.monotonic())
                        return
            time.sleep(0.002)  # polling files for a condition, not a timed wait

    rc, results, audits, summ = run_job(ringfence, worker, stopped_dir, [],
                                        worker_flags + ["--hold-at", str(hold), "--ckpt-dir", ck],
                                        during=signal_at_hold)
    check(bool(signalled), f"{name}: step {hold} was never applied by rank 0, so no signal was sent")
    check(rc == 0, f"{name}: the stopped job exited {rc} (see {stopped_dir}/output.txt)")
    stop_step = hold + 1
    finals = list(results.values())
    check(len(finals) == W, f"{name}: {len(finals)} worker results after the stop, expected {W}")
    check(all(r["step"] == stop_step for r in finals),
          f"{name}: workers stopped at steps {sorted(r['step'] for r in finals)}, expected all at {stop_step}")
    check(len({r["digest"] for r in finals}) == 1, f"{name}: replicas differ after the stop: {finals}")
    ckpts = sorted(glob.glob(os.path.join(ck, "ckpt-*.safetensors")))
    check(bool(ckpts) and ckpts[-1].endswith(f"ckpt-{stop_step:09d}.safetensors"),
          f"{name}: newest checkpoint {ckpts[-1:] or 'none'}, expected step {stop_step}")
    applied = sorted({ln["s"] for lines in audits.values() for ln in lines if ln["event"] == "apply"})
    check(applied == list(range(stop_step + 1)), f"{name}: steps applied before the stop: {applied}")
    resume_dir = os.path.join(tmp, "resumed")
    os.makedirs(resume_dir)
    rc, results, audits, summ = run_job(ringfence, worker, resume_dir, [], worker_flags + ["--ckpt-dir", ck, "--resume"])
    done = check_job(f"{name}/resumed", rc, results, audits, summ, resume_dir)
    check(all(r["resumed_step"] == stop_step for r in done),
          f"{name}: resumed from {sorted(r['resumed_step'] for r in done)}, expected {stop_step}")
    if done and ref:
        check(done[0]["digest"] == ref[0]["digest"],
              f"{name}: final digest after the resume {done[0]['digest']} != uninterrupted {ref[0]['digest']}")
        print(f"{name}: stopped at step {stop_step} (exit {0 if rc == 0 else rc}), resumed, final digest "
              f"{done[0]['digest']} (uninterrupted {ref[0]['digest']})")


def main():
    global STEPS, W
    ringfence, worker, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    launcher_flags, worker_flags, expect = SCENARIOS[scenario]
    W = expect.get("world", W)
    if "--steps" in worker_flags:
        STEPS = int(worker_flags[worker_flags.index("--steps") + 1])
    tmp = tempfile.mkdtemp(prefix=f"ddp_{scenario}_")
    try:
        if expect.get("diverge"):  # no reference needed: the job must fail
            fault_dir = os.path.join(tmp, "faults")
            os.makedirs(fault_dir)
            rc, results, audits, summ = run_job(ringfence, worker, fault_dir, launcher_flags, worker_flags)
            with open(os.path.join(fault_dir, "output.txt")) as fh:
                out = fh.read()
            check(rc not in (0, None), f"{scenario}: the job did not fail (exit {rc})")
            check(summ is not None and summ.get("phase") == "STOPPED" and "digest mismatch" in summ.get("error", ""),
                  f"{scenario}: the coordinator did not stop the job on a digest mismatch: {summ and summ.get('error')}")
            # (The launcher may restart a worker that exited just before it saw STOPPED; the
            # coordinator refuses it, so it never trains.)
            late = [f for f, lines in audits.items() if "-inc0" not in f and any(l["event"] == "apply" for l in lines)]
            check(not late, f"{scenario}: restarted workers trained after the divergence: {late}")
            check("replicas diverged (verify-every" in out, f"{scenario}: no divergence error in the output")
            check(not any(r["step"] == STEPS - 1 for r in results.values()), f"{scenario}: a worker finished")
            applied = max((ln["s"] for lines in audits.values() for ln in lines if ln["event"] == "apply"), default=-1)
            check(applied == 14, f"{scenario}: last applied step {applied}, expected 14 (first check after 12)")
            print(f"{scenario}: {'FAILED' if failures else 'ok'}")
            return 1 if failures else 0
        if "graceful" in expect:
            graceful_stop(ringfence, worker, tmp, scenario, expect["graceful"], worker_flags)
            print(f"{scenario}: {'FAILED' if failures else 'ok'}")
            return 1 if failures else 0
        if expect.get("whole_job"):
            ref_dir = os.path.join(tmp, "reference")
            os.makedirs(ref_dir)
            rc, results, audits, summ = run_job(ringfence, worker, ref_dir, [], worker_flags)
            ref = check_job(f"{scenario}/reference", rc, results, audits, summ, ref_dir)
            job = os.path.join(tmp, "job")
            os.makedirs(job)
            ckpt_dir = os.path.join(job, "ckpt")
            ck = ["--ckpt-dir", ckpt_dir, "--ckpt-every", "5"]
            if expect["whole_job"] == "restart":
                killed = []
                rc, results, audits, summ = run_job(
                    ringfence, worker, job, ["--inject", "stop:rank=1:step=23:phase=forward"], worker_flags + ck,
                    during=lambda p, aud: killed.append(kill_every_worker_at_freeze(p, aud, ckpt_dir)))
                check([k for k, _ in killed] == [W], f"{scenario}: killed {killed} workers at the freeze, expected {W}")
                on_disk = killed[0][1] if killed else None
                finals = check_job(scenario, rc, results, audits, summ, job)
                first = {f: l for f, l in audits.items() if "-inc0" in f}
                later = {f: l for f, l in audits.items() if "-inc0" not in f}
                reached = max([-1] + [ln["s"] for lines in first.values() for ln in lines if ln["event"] == "apply"])
                restored = [ln["s"] for lines in later.values() for ln in lines if ln["event"] == "resume"]
                check(bool(restored) and len(set(restored)) == 1,
                      f"{scenario}: restarted workers restored {restored}, expected one step")
                check(not any(ln["event"] == "start" for lines in later.values() for ln in lines),
                      f"{scenario}: a restarted worker started fresh (step -1) instead of from the checkpoint")
                with open(os.path.join(job, "events.jsonl")) as fh:
                    plans = [json.loads(x) for x in fh if '"plan"' in x]
                check(any("whole-job restart" in e.get("detail", "") for e in plans),
                      f"{scenario}: no plan says whole-job restart: {[e.get('detail') for e in plans]}")
                recs = (summ or {}).get("recoveries", [])
                check(len(recs) == 1 and recs[0].get("whole_job_restart") and recs[0].get("finished")
                      and recs[0].get("target_step") in set(restored),
                      f"{scenario}: the summary's recovery is not one finished whole-job restart to T = the "
                      f"restored step {sorted(set(restored))}: {recs}")
                with open(os.path.join(job, "output.txt"), errors="replace") as fh:
                    check(", restored from disk: no worker held state)" in fh.read(),
                          f"{scenario}: the launcher's recovery line does not say the state came from disk")
                resumed = set(restored)
            else:
                on_disk = kill_whole_job(job, ringfence, worker, launcher_flags, worker_flags + ck, 22, ckpt_dir)
                rc, results, audits, summ = run_job(ringfence, worker, job, launcher_flags,
                                                    worker_flags + ck + ["--resume"])
                finals = check_job(scenario, rc, results, audits, summ, job)
                # the steps applied before the whole job died (lines before each "resume")
                reached = max([-1] + [ln["s"] for lines in audits.values() for ln in
                                           lines[:next((i for i, x in enumerate(lines) if x["event"] == "resume"), 0)]
                                           if ln["event"] == "apply"])
                resumed = {r["resumed_step"] for r in finals}
            # The newest checkpoint on disk when everything died: 19 on an idle machine; on a
            # loaded one the writer (nice 10) may still have been writing, and a periodic
            # checkpoint due while the previous write runs is taken at a later step
            # (ddp/checkpoint_policy.h), so any step from 4 to 22.
            check(on_disk is not None and 4 <= on_disk <= 22,
                  f"{scenario}: newest checkpoint on disk at the kill: step {on_disk}, expected one from 4 to 22")
            check(resumed == {on_disk},
                  f"{scenario}: resumed from {resumed}, expected the newest checkpoint on disk at the kill ({on_disk})")
            check(reached == 22, f"{scenario}: the first run applied up to step {reached}, expected 22")
            if finals and ref:
                check(finals[0]["digest"] == ref[0]["digest"],
                      f"{scenario}: final digest {finals[0]['digest']} != uninterrupted {ref[0]['digest']}")
                print(f"{scenario}: killed at step {reached}, resumed from step {next(iter(resumed))}, "
                      f"redone {reached - next(iter(resumed))} step(s); final digest {finals[0]['digest']}")
            print(f"{scenario}: {'FAILED' if failures else 'ok'}")
            return 1 if failures else 0
        ref_dir = os.path.join(tmp, "reference")
        os.makedirs(ref_dir)
        rc, results, audits, summ = run_job(ringfence, worker, ref_dir, [], worker_flags)
        ref = check_job(f"{scenario}/reference", rc, results, audits, summ, ref_dir)
        ref_digest = ref[0]["digest"] if ref else None
        ref_loss = ref[0]["final_loss"] if ref else None

        fault_dir = os.path.join(tmp, "faults")
        os.makedirs(fault_dir)
        rc, results, audits, summ = run_job(ringfence, worker, fault_dir, launcher_flags,
                                            worker_flags + expect.get("fault_worker_flags", []))
        finals = check_job(scenario, rc, results, audits, summ, fault_dir)
        # every worker-side fault really fired (the worker logs it just before)
        specs = [launcher_flags[i + 1] for i, f in enumerate(launcher_flags) if f == "--inject"]
        fired = {ln["spec"] for lines in audits.values() for ln in lines if ln["event"] == "inject"}
        for spec in specs:
            check(spec in fired, f"{scenario}: fault {spec} never fired (fired: {sorted(fired)})")
        recs = (summ or {}).get("recoveries", [])
        check(len(recs) == expect["recoveries"], f"{scenario}: {len(recs)} recoveries, expected {expect['recoveries']}")
        check_cost(scenario, launcher_flags, summ, fault_dir)
        for r in recs:
            check(r.get("finished"), f"{scenario}: recovery not finished: {r}")
            for ph in ("detect", "agree", "connect", "transfer", "verify"):
                check(r["phases"].get(ph) is not None, f"{scenario}: recovery without {ph} time: {r['phases']}")
        if "cause" in expect:
            check(bool(recs) and recs[0].get("cause") == expect["cause"],
                  f"{scenario}: the first recovery's cause is not {expect['cause']}: {recs[:1]}")
        if "hang_s" in expect:
            # From the last worker-side fault firing (its audit line, written just before)
            # to the first step applied after it: detection at default settings is bounded.
            fired_at = max((ln["ts_us"] for lines in audits.values() for ln in lines if ln["event"] == "inject"),
                           default=None)
            after = [ln["ts_us"] for lines in audits.values() for ln in lines
                     if ln["event"] == "apply" and fired_at is not None and ln["ts_us"] > fired_at]
            took = (min(after) - fired_at) / 1e6 if after else None
            check(took is not None and took <= expect["hang_s"],
                  f"{scenario}: from the fault to the next applied step took {took} s, bound {expect['hang_s']} s")
            print(f"{scenario}: fault to the next applied step: {took} s (bound {expect['hang_s']} s)")
        if "min_rounds" in expect:
            check(any(r.get("rounds", 0) >= expect["min_rounds"] for r in recs),
                  f"{scenario}: no recovery took {expect['min_rounds']} rounds: {recs}")
        if finals and ref_digest:
            if expect.get("shrink"):
                if expect.get("grow"):
                    check(all(r["world"] == W for r in finals), f"{scenario}: did not grow back to {W}")
                    check(any(r.get("planned") for r in recs), f"{scenario}: no planned recovery (grow): {recs}")
                    check(any(r["world"] == W - 1 for r in recs), f"{scenario}: never shrank: {recs}")
                else:
                    check(all(r["world"] == W - 1 for r in finals), f"{scenario}: did not shrink to {W - 1}")
                loss = finals[0]["final_loss"]
                print(f"{scenario}: final loss {loss} (failure-free {ref_loss}), digests {finals[0]['digest']} vs {ref_digest}")
                if expect.get("exact"):  # exact mode: the same bits whatever W did
                    check(finals[0]["digest"] == ref_digest,
                          f"{scenario}: exact mode: final digest {finals[0]['digest']} != failure-free {ref_digest}")
                else:
                    check(abs(loss - ref_loss) <= 0.01 * abs(ref_loss),
                          f"{scenario}: final loss {loss} not within 1 % of {ref_loss}")
            else:
                check(all(r["world"] == W for r in finals), f"{scenario}: world changed")
                check(finals[0]["digest"] == ref_digest,
                      f"{scenario}: final digest {finals[0]['digest']} != failure-free {ref_digest}")
        if "held" in expect:  # (slot whose restart was held, slot restarted at once)
            held, at_once = expect["held"]
            with open(os.path.join(fault_dir, "output.txt"), errors="replace") as fh:
                out = fh.read()
            check(f"slot {held} exited (status -9): a spare takes its place" in out,
                  f"{scenario}: slot {held}'s restart was not held for the spare")
            check(f"slot {held} restarted (incarnation 1) as the next spare" in out and "completed (T " in out,
                  f"{scenario}: slot {held}'s held restart was not started after the recovery")
            spawns = {w["slot"]: w.get("spawns", []) for w in (summ or {}).get("workers", [])}
            check([s.get("reason") for s in spawns.get(at_once, [])][1:2] == ["restart"],
                  f"{scenario}: slot {at_once} (no spare left) was not restarted at once: {spawns.get(at_once)}")
            recs_done = [r["first_seen_us"] + r["total_ms"] * 1000 for r in recs if r.get("finished")]
            held_spawn = [s["wall_us"] for s in spawns.get(held, []) if s.get("incarnation") == 1]
            check(bool(recs_done) and bool(held_spawn) and held_spawn[0] >= max(recs_done),
                  f"{scenario}: slot {held} restarted before the recovery completed: {held_spawn} vs {recs_done}")
        if "blame" in expect:
            check_blame(scenario, fault_dir, expect["blame"])
            check(all(r["worker"]["slot"] == expect["blame"] for r in recs),
                  f"{scenario}: the recovery summary names another slot than {expect['blame']}: {recs}")
        for r in recs:
            print(f"{scenario}: recovery {r['cause']} slot {r['worker']['slot']} T {r['target_step']} world "
                  f"{r['world']} rounds {r['rounds']} total {r['total_ms']} ms phases {r['phases']}")
    finally:
        if failures:
            print(f"{scenario}: {len(failures)} failure(s); files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{scenario}: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
