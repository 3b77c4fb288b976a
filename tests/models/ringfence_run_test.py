#!/usr/bin/env python3
"""train_mlp under `ringfence run`: a rank killed in the middle of an all-reduce changes
nothing in the result.

    ringfence_run_test.py RINGFENCE TRAIN_MLP

Runs the same job twice on synthetic data (W = 3, 40 steps): without faults, and with
rank 1 SIGKILLed after the first chunk of step 20's all-reduce. Checks:
  * both launchers exit 0 with the job DONE;
  * every worker of each run ends at the last step with the same state digest, and the
    faulty run's digest (and test accuracy) equals the failure-free run's (replace mode,
    same W: bitwise, docs/protocol.md R4);
  * the launcher's summary shows no recovery in the first run and exactly one in the
    second (cause, target step 19 or 20, world 3, phase times);
  * slot 0's --metrics: steps, world size, recoveries; its --loss-log has every step;
  * the survivors' flight records of the failed all-reduce are in --flight-dir;
  * the shared --audit-log shows the injected kill, and every step applied exactly once
    per lineage with one digest per step wherever it was applied;
  * the summary lists the kill as fired by the worker (slot 1, step 20), told to the
    coordinator before the audit's inject (recovery is measured from the latter), and a second spec
    whose step was reached but that cannot fire (phase=transfer at a step no recovery
    redoes) as never fired, with why, also in the launcher's last lines.
Every run has a deadline; on expiry the launcher's process group is SIGKILLed (its
workers die with it by PDEATHSIG) and the test fails.
"""
import glob
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rf_testlib import check, failures, run  # noqa: E402

W, STEPS = 3, 40
KILL = "kill:rank=1:step=20:phase=allreduce:after_chunks=1"
NEVER = "kill:rank=0:step=30:phase=transfer"  # step 30 is reached, but no recovery redoes it
NEVER_CHUNKS = "slow:rank=0:step=25:phase=allreduce:after_chunks=999"  # no all-reduce here has 999
FINAL = re.compile(r"^== train_mlp slot (\d+) incarnation (\d+): step (-?\d+), generation (\d+), world (\d+), "
                   r"recoveries (\d+), state (x3:[0-9a-f]{32})$", re.M)

def run_job(ringfence, train_mlp, work, launcher_flags, timeout=120):
    os.makedirs(work)
    cmd = [ringfence, "run", "-n", str(W), "--summary", f"{work}/summary.json", *launcher_flags, "--",
           train_mlp, "--synthetic", "2048", "--batch", "96", "--epochs", "3", "--max-steps", str(STEPS), "--lr", "0.01", "--log-interval", "10",
           "--verify-every", "10", "--metrics", f"{work}/metrics.json", "--loss-log", f"{work}/loss.jsonl",
           "--audit-log", f"{work}/audit.jsonl", "--flight-dir", f"{work}/flight"]
    rc, output = run(cmd, f"{work}/output.txt", timeout)

    def load(name):
        try:
            with open(f"{work}/{name}") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    return rc, output, load("summary.json"), load("metrics.json")


def check_run(name, work, rc, output, summary, metrics):
    check(rc == 0, f"{name}: launcher exit {rc} (see {work}/output.txt)")
    check(summary is not None and summary.get("phase") == "DONE", f"{name}: job not DONE")
    finals = FINAL.findall(output)
    live = {}  # slot -> last final line (a killed incarnation prints none)
    for slot, inc, step, gen, world, rec, digest in finals:
        live[int(slot)] = (int(inc), int(step), int(world), digest)
    check(sorted(live) == list(range(W)), f"{name}: final lines from slots {sorted(live)}, want 0..{W - 1}")
    check(all(v[1] == STEPS - 1 and v[2] == W for v in live.values()),
          f"{name}: not every worker ended at step {STEPS - 1} with world {W}: {live}")
    digests = {v[3] for v in live.values()}
    check(len(digests) == 1, f"{name}: replicas differ at the end: {digests}")
    check("test accuracy" in output, f"{name}: no test accuracy line")
    check(metrics is not None, f"{name}: no --metrics file")
    if metrics:
        check(metrics["steps"] == STEPS and metrics["world_size"] == W, f"{name}: metrics {metrics}")
        check(digests == {metrics["state_digest"]}, f"{name}: metrics digest {metrics['state_digest']} vs {digests}")
    with open(f"{work}/loss.jsonl") as f:
        steps = [json.loads(l)["step"] for l in f if l.strip()]
    check(set(steps) == set(range(STEPS)), f"{name}: --loss-log misses steps: {sorted(set(range(STEPS)) - set(steps))}")
    # Exactly once per lineage (slot, incarnation): applied steps follow the worker's last
    # state by one; every application or transfer of step s carries the same digest.
    with open(f"{work}/audit.jsonl") as f:
        lines = [json.loads(l) for l in f if l.strip()]
    state, step_digest = {}, {}
    for ln in lines:
        key, ev, s = (ln["slot"], ln["inc"]), ln["event"], ln["s"]
        if ev == "start":
            state[key] = -1
        elif ev == "transfer":
            check(s >= state.get(key, -1), f"{name}: {key}: transfer to older step {s}")
            state[key] = s
        elif ev == "apply":
            check(state.get(key) is not None and s == state[key] + 1,
                  f"{name}: {key}: applied step {s} after state {state.get(key)}")
            state[key] = s
        if ev in ("apply", "transfer"):
            d = step_digest.setdefault(s, ln["digest"])
            check(d == ln["digest"], f"{name}: step {s} has two digests: {d} and {ln['digest']}")
    check(sorted(step_digest) == list(range(STEPS)), f"{name}: the audit log does not cover every step")
    return digests.pop() if len(digests) == 1 else None, lines


def main():
    ringfence, train_mlp = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="models_ringfence_run_")
    try:
        rc, out, summ, met = run_job(ringfence, train_mlp, f"{tmp}/clean", [])
        ref, _ = check_run("clean", f"{tmp}/clean", rc, out, summ, met)
        check(summ is None or summ.get("recoveries") == [], "clean: the launcher reports recoveries")
        check(met is None or met.get("recoveries") == 0, "clean: metrics report recoveries")
        ref_acc = met and met["test_accuracy"]

        rc, out, summ, met = run_job(ringfence, train_mlp, f"{tmp}/kill", ["--inject", KILL, "--inject", NEVER,
                                                                   "--inject", NEVER_CHUNKS])
        got, audit = check_run("kill", f"{tmp}/kill", rc, out, summ, met)
        check(ref is not None and got == ref, f"kill: final state {got} differs from the failure-free run's {ref}")
        check(met is None or met["test_accuracy"] == ref_acc, "kill: test accuracy differs from the failure-free run")
        check(met is None or met.get("recoveries") == 1, f"kill: slot 0 reports {met and met.get('recoveries')} recoveries")
        recs = (summ or {}).get("recoveries", [])
        check(len(recs) == 1, f"kill: the summary lists {len(recs)} recoveries, want 1")
        if len(recs) == 1:
            r = recs[0]
            check(r["finished"] and r["world"] == W and r["target_step"] in (19, 20), f"kill: recovery {r}")
            check(all(r["phases"].get(p) is not None for p in ("detect", "agree", "connect", "transfer", "verify")),
                  f"kill: recovery phases missing: {r['phases']}")
        flight = []
        for f in glob.glob(f"{tmp}/kill/flight/flight-slot*-inc0.jsonl"):
            with open(f) as fh:
                flight += [json.loads(l) for l in fh if l.strip()]
        check(any(r["state"] == "failed" and r["step"] == 20 for r in flight),
              "kill: no survivor's flight record shows the failed all-reduce of step 20 in --flight-dir")
        check('"collective"' not in out, "kill: flight records went to the output despite --flight-dir")
        fired = [l for l in audit if l["event"] == "inject"]
        check(len(fired) == 1 and fired[0]["slot"] == 1 and fired[0]["s"] == 20, f"kill: inject events {fired}")
        check(any(l["event"] == "apply" and l["slot"] == 1 and l["inc"] == 1 for l in audit),
              "kill: the replacement of slot 1 never trained")
        by_worker = [(x.get("spec"), x.get("slot"), x.get("step")) for x in (summ or {}).get("injected", [])
                     if x.get("by") == "worker"]
        check(by_worker == [(KILL, 1, 20)], f"kill: the summary's faults fired by workers: {by_worker}")
        # The audit's inject is the moment recovery is measured from (bench/recovery): it
        # must come after the worker told the coordinator, not before that round trip.
        told = [x["wall_us"] for x in (summ or {}).get("injected", []) if x.get("by") == "worker"]
        check(len(fired) == 1 and len(told) == 1 and told[0] <= fired[0]["ts_us"],
              f"kill: the audit's inject ({fired and fired[0]['ts_us']}) precedes the coordinator's record of it "
              f"({told}): a recovery measured from the audit includes the worker's call to the coordinator")
        why = (f"step 30 was reached, but no worker fired it (phase=transfer fires only in a recovery that redoes "
               f"step 30, in rank 0 if it sends or receives the state)")
        why_chunks = ("step 25 was reached, but no worker fired it (it fires in the worker of rank 0, in its first "
                      "incarnation only, once 999 chunk(s) of the step's all-reduce went through: it may have had fewer)")
        want = [{"spec": NEVER, "certain": True, "reason": why},
                {"spec": NEVER_CHUNKS, "certain": True, "reason": why_chunks}]
        check((summ or {}).get("not_fired") == want, f"kill: not_fired {(summ or {}).get('not_fired')}, want {want}")
        check(f"ringfence: --inject {NEVER} never fired: {why}" in out, "kill: the launcher did not say it never fired")
    finally:
        if failures:
            print(f"(work dir kept: {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
