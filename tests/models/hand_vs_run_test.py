#!/usr/bin/env python3
"""One step loop (models/train.h): train_mlp by hand and under `ringfence run -n 1`, with the
same flags, end on the same state digest.

    hand_vs_run_test.py RINGFENCE TRAIN_MLP

1. The same 12 steps (synthetic data, --batch 30) by hand and under `ringfence run -n 1`:
   both exit 0 with one final digest, in --metrics and on the final line, and the same loss
   at every step (--loss-log). The batch is not a power of two on purpose: a mean over the
   batch and a sum divided by its size round differently there, so two loops that computed
   the loss those two ways would end on different digests.
2. Checkpoints cross over: 6 steps by hand into --ckpt-dir D, then `ringfence run -n 1
   ... --ckpt-dir D --resume` to step 12 ends on that same digest.
Every run has a deadline; on expiry its process group is SIGKILLed and the test fails.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rf_testlib  # noqa: E402
from rf_testlib import check, load_json, read_jsonl  # noqa: E402

DEADLINE_S = 60
FLAGS = ["--synthetic", "600", "--batch", "30", "--epochs", "2", "--max-steps", "12", "--seed", "3", "--lr", "0.02",
         "--log-interval", "4"]
FINAL = re.compile(r"^== train_mlp slot 0 incarnation 0: step (\d+), generation \d+, world 1, .*state (x3:[0-9a-f]{32})$",
                   re.M)


def train(name, cmd, tmp, extra=()):
    """Runs one training; returns (metrics or None, {step: loss}, final lines)."""
    metrics, losses = f"{tmp}/{name}.json", f"{tmp}/{name}-loss.jsonl"
    rc, out = rf_testlib.run([*cmd, *FLAGS, *extra, "--metrics", metrics, "--loss-log", losses],
                             f"{tmp}/{name}.txt", DEADLINE_S)
    check(rc == 0, f"{name}: exit {'(over its deadline)' if rc is None else rc}: {out[-1200:]}")
    m = load_json(metrics) if rc == 0 else None
    check(rc != 0 or m is not None, f"{name}: no --metrics")
    return m, {r["step"]: r["loss"] for r in read_jsonl(losses)}, FINAL.findall(out)


def main():
    ringfence, train_mlp = sys.argv[1:3]
    tmp = tempfile.mkdtemp(prefix="rf_hand_vs_run_")
    launched = [ringfence, "run", "-n", "1", "--quiet", "--", train_mlp]
    try:
        hand, hand_loss, hand_final = train("hand", [train_mlp], tmp)
        run, run_loss, run_final = train("run", launched, tmp)
        if hand and run:
            check(hand["steps"] == run["steps"] == 12 and hand["world_size"] == run["world_size"] == 1,
                  f"steps or world differ: by hand {hand['steps']} / W {hand['world_size']}, "
                  f"ringfence run {run['steps']} / W {run['world_size']}")
            check(hand["state_digest"] == run["state_digest"],
                  f"by hand the final state is {hand['state_digest']}, under ringfence run -n 1 {run['state_digest']}")
            check(hand_final == [("11", hand["state_digest"])] and run_final == [("11", run["state_digest"])],
                  f"final lines: by hand {hand_final}, under ringfence run {run_final}")
        check(sorted(hand_loss) == list(range(12)) and hand_loss == run_loss,
              f"the losses differ: by hand {hand_loss}, under ringfence run {run_loss}")

        # A checkpoint written by hand resumes under the launcher, on the same digest.
        d = f"{tmp}/ckpt"
        first, _, _ = train("hand-half", [train_mlp], tmp, ["--max-steps", "6", "--ckpt-dir", d])
        resumed, _, _ = train("run-resumed", launched, tmp, ["--ckpt-dir", d, "--resume"])
        if first and resumed and hand:
            check(first["steps"] == 6 and resumed["resumed_step"] == 5,
                  f"by hand to step 6, resumed under ringfence run: steps {first['steps']}, "
                  f"resumed after step {resumed['resumed_step']}")
            check(resumed["state_digest"] == hand["state_digest"],
                  f"6 steps by hand then 6 under ringfence run: {resumed['state_digest']}, "
                  f"12 by hand: {hand['state_digest']}")
        if hand and run:
            print(f"by hand {hand['state_digest']}, ringfence run -n 1 {run['state_digest']}, "
                  f"by hand then resumed under ringfence run {resumed['state_digest'] if resumed else None}")
    finally:
        rf_testlib.keep_or_remove(tmp)
    rf_testlib.exit_on_failures("train_mlp by hand and under ringfence run -n 1: one final state")


if __name__ == "__main__":
    main()
