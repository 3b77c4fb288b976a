#!/usr/bin/env python3
"""hang_variants — a hung training thread (its process and heartbeat thread alive: the
failure users meet as "NCCL timeout") at DEFAULT settings, as a new user would run it:

    build/bin/ringfence run -n 4 --inject SPEC... -- build/bin/train_mlp --epochs 1

for the issue's variants (rank 0 in the all-reduce, rank 0 in backward, the last rank, a
hang with a second fault at the same step), and the same job without --inject. For each it
prints whether the job ended DONE, whether its final state digest is bitwise the failure-
free run's, the recoveries' causes, and the time from the hang (the worker's audit line
written just before the fault fires) to the first application of the hung step, redone by
the new generation.

    hang_variants.py [--build build] [--program train_mlp] [--json OUT]

Exit status 1 if any variant did not end DONE with the failure-free digest.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

VARIANTS = [
    ["hang:rank=0:step=325:phase=allreduce"],
    ["hang:rank=0:step=119:phase=backward"],
    ["hang:rank=3:step=327:phase=allreduce"],
    ["hang:rank=0:step=325:phase=allreduce", "kill:rank=2:step=325:phase=backward"],
    ["hang:rank=1:step=200:phase=backward", "stop:rank=3:step=200:phase=forward"],
]
DIGEST = re.compile(r"== test accuracy .* state (x3:[0-9a-f]{32})")


def run(args, specs, work):
    os.makedirs(work, exist_ok=True)
    audit, summary = os.path.join(work, "audit.jsonl"), os.path.join(work, "summary.json")
    cmd = [os.path.join(args.build, "bin", "ringfence"), "run", "-n", "4", "--summary", summary]
    for s in specs:
        cmd += ["--inject", s]
    cmd += ["--", os.path.join(args.build, "bin", args.program), "--epochs", "1", "--audit-log", audit]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    m = DIGEST.search(p.stdout)
    summ = json.load(open(summary)) if os.path.exists(summary) else {}
    lines = [json.loads(x) for x in open(audit)] if os.path.exists(audit) else []
    hang = [x for x in lines if x["event"] == "inject" and x.get("spec", "").startswith("hang:")]
    # The hung step itself, applied after the recovery (a slower peer may still be applying
    # the step before when the hang fires).
    after = [x["ts_us"] for x in lines if x["event"] == "apply" and hang and x["s"] >= hang[0]["s"]]
    return {"specs": specs, "exit": p.returncode, "phase": summ.get("phase"), "digest": m.group(1) if m else None,
            "causes": [r.get("cause") for r in summ.get("recoveries", [])],
            "hang_to_first_step_ms": (min(after) - hang[0]["ts_us"]) / 1000 if after else None,
            "output_tail": p.stdout[-1500:] if p.returncode else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--program", default="train_mlp")
    ap.add_argument("--json")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hang_variants_")
    ref = run(args, [], os.path.join(tmp, "reference"))
    print(f"# {args.program} --epochs 1, W = 4, default settings; reference: exit {ref['exit']}, {ref['phase']}, "
          f"state {ref['digest']}")
    rows, bad = [], 0
    for i, specs in enumerate(VARIANTS):
        r = run(args, specs, os.path.join(tmp, f"v{i}"))
        same = r["digest"] is not None and r["digest"] == ref["digest"]
        ok = r["exit"] == 0 and r["phase"] == "DONE" and same
        bad += not ok
        rows.append({**r, "bitwise_equal": same, "ok": ok})
        took = f"{r['hang_to_first_step_ms']:.0f} ms" if r["hang_to_first_step_ms"] is not None else "-"
        print(f"{' + '.join(specs):80} {r['phase'] or '?':8} {'bitwise equal' if same else 'DIFFERENT':13} "
              f"hang -> first step {took:>8}  causes {','.join(r['causes'])}", flush=True)
        if not ok:
            print(r["output_tail"], file=sys.stderr)
    print(f"{len(VARIANTS) - bad} passed, {bad} failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"reference": ref, "variants": rows}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
