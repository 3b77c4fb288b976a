"""The chaos soak's cases: a pure function of (seed, case index), so a seed names the same
sequence of cases on every machine and every run (however many a time budget lets run).

A case is a model, a step count and its faults:
  * "inject": --inject specs the workers fire themselves (elastic/fault_spec.h): one, or two
    at once (other ranks, the same or another step), or a second one during the first one's
    recovery (phase=transfer or recovery at the first one's step: the recovery redoes it);
  * "external": signals sent by PID from outside (chaos.py): SIGSTOP then SIGCONT after
    0.5-4 s, or never (the launcher ends the evicted process); two workers SIGKILLed at once;
    a SIGKILL, then a second one once the coordinator revoked the generation (during the
    recovery from the first);
  * "output": the launcher's output is a one-page pipe (chaoslib.Job piped): nobody reads it
    for 0.5-5 s, half of the time with a worker SIGSTOPped meanwhile (a paused terminal
    while a debugger freezes a rank); or it is read slowly (a slow log shipper) all job long
    while one fault fires. The output must cost nothing: the case's cost is its faults'
    (chaos.py judge);
  * "disk": the job checkpoints every CKPT_EVERY steps and its checkpoint writer (rank 0)
    meets a storage fault (--inject disk:...): ENOSPC, EIO, EROFS or EDQUOT on one or two
    checkpoints, or a slow disk; half of them with a second, failing fault elsewhere. A
    failed checkpoint is a warning, so the job must still end DONE with the reference digest.
"""
import random

KINDS = ("kill", "stop", "hang", "exit", "drop", "slow")
FAILING = ("kill", "stop", "hang", "exit", "drop")  # the kinds that need a recovery
PHASES = ("forward", "backward", "allreduce", "allreduce-chunks", "optimizer")
# A failure in these phases of step s leaves every survivor at s - 1 (R2: nobody applies s
# without the failed rank's gradient), so the recovery redoes s and a phase=transfer or
# recovery spec of step s fires in it. (In the optimizer, the others may have applied s.)
BEFORE_APPLY = ("forward", "backward", "allreduce", "allreduce-chunks")
SHAPES = {"one": 3, "two": 2, "during_recovery": 3, "sigstop": 1, "kill_two": 1, "kill_during_recovery": 1, "disk": 2,
          "unread": 2, "slow_consumer": 1}
SLOW_READ_BYTES_PER_S = 2048
DISK_ERRORS = ("ENOSPC", "EIO", "EROFS", "EDQUOT")
# Every 10 steps: a disk fault at a step <= steps - LAST_MARGIN strikes at most two
# checkpoints, both before the final one (whose failure would end the job, by design).
CKPT_EVERY = 10
STEPS = {"mlp": 300, "cnn": 150}  # seconds per failure-free job on 2 cores at W = 4
FIRST_STEP, LAST_MARGIN = 10, 40  # faults at steps 10 .. steps - 40: time to recover and go on


def spec(rng, kind, rank, step, phase):
    s = f"{kind}:rank={rank}:step={step}"
    if phase == "allreduce-chunks":
        s += f":phase=allreduce:after_chunks={rng.choice((1, 2))}"
    else:
        s += f":phase={phase}"
    if kind == "slow":  # 2-10x its own step time, for 1-20 steps
        s += f":factor={rng.choice((2, 3, 5, 10))}:steps={rng.choice((1, 5, 20))}"
    return s


def make_case(seed, index, models, world):
    """Case number index of the seed's sequence (models alternate: case i trains models[i % n])."""
    rng = random.Random(f"chaos-{seed}-{index}")
    model = models[index % len(models)]
    steps = STEPS[model]
    step = rng.randint(FIRST_STEP, steps - LAST_MARGIN)
    shape = rng.choices(list(SHAPES), weights=list(SHAPES.values()))[0]
    case = {"seed": seed, "index": index, "model": model, "steps": steps, "world": world, "shape": shape,
            "inject": [], "external": [], "ckpt_every": 0}
    ranks = list(range(world))
    if shape == "one":
        case["inject"] = [spec(rng, rng.choice(KINDS), rng.choice(ranks), step, rng.choice(PHASES))]
    elif shape == "two":
        r1, r2 = rng.sample(ranks, 2)
        step2 = step if rng.random() < 0.5 else rng.randint(FIRST_STEP, steps - LAST_MARGIN)
        case["inject"] = [spec(rng, rng.choice(KINDS), r1, step, rng.choice(PHASES)),
                          spec(rng, rng.choice(KINDS), r2, step2, rng.choice(PHASES))]
    elif shape == "during_recovery":
        first = rng.choice(FAILING)
        r1 = rng.choice(ranks)
        survivors = [r for r in ranks if r != r1]
        # A dropped rank lives on, holding state: nobody receives any, so no transfer phase.
        phase2 = "recovery" if first == "drop" else rng.choice(("transfer", "recovery"))
        # The state's source is the lowest rank holding T (elastic/plan.cpp), a survivor.
        r2 = min(survivors) if phase2 == "transfer" else rng.choice(survivors)
        case["inject"] = [spec(rng, first, r1, step, rng.choice(BEFORE_APPLY)),
                          spec(rng, rng.choice(KINDS), r2, step, phase2)]
    elif shape == "sigstop":
        case["external"] = [{"action": "sigstop", "slot": rng.choice(ranks), "step": step,
                             "cont_after_s": round(rng.uniform(0.5, 4.0), 1) if rng.random() < 0.75 else None}]
    elif shape == "unread":
        x = {"action": "unread", "step": step, "for_s": round(rng.uniform(0.5, 5.0), 1)}
        if rng.random() < 0.5:
            x.update(slot=rng.choice(ranks), stop_s=round(rng.uniform(0.5, x["for_s"]), 1))
        case["external"] = [x]
    elif shape == "slow_consumer":
        case["external"] = [{"action": "slow_consumer", "step": 0, "bytes_per_s": SLOW_READ_BYTES_PER_S}]
        case["inject"] = [spec(rng, rng.choice(FAILING), rng.choice(ranks), step, rng.choice(PHASES))]
    elif shape == "kill_two":
        case["external"] = [{"action": "kill_two", "slots": sorted(rng.sample(ranks, 2)), "step": step}]
    elif shape == "disk":
        case["ckpt_every"] = CKPT_EVERY
        what = (f"error={rng.choice(DISK_ERRORS)}" if rng.random() < 0.75 else f"delay={rng.choice((1, 3))}")
        case["inject"] = [f"disk:rank=0:step={step}:{what}:writes={rng.choice((1, 2))}"]
        if rng.random() < 0.5:
            step2 = rng.randint(FIRST_STEP, steps - LAST_MARGIN)
            case["inject"].append(spec(rng, rng.choice(FAILING), rng.choice(ranks), step2, rng.choice(PHASES)))
    else:
        a, b = rng.sample(ranks, 2)
        case["external"] = [{"action": "kill_during_recovery", "slots": [a, b], "step": step}]
    return case


def describe(case):
    parts = list(case["inject"])
    for x in case["external"]:
        if x["action"] == "sigstop":
            parts.append(f"SIGSTOP slot {x['slot']} after step {x['step']}, " +
                         (f"SIGCONT {x['cont_after_s']} s later" if x["cont_after_s"] is not None else "never SIGCONT"))
        elif x["action"] == "unread":
            parts.append(f"output unread for {x['for_s']} s after step {x['step']}" +
                         (f", slot {x['slot']} SIGSTOPped for {x['stop_s']} s meanwhile" if "slot" in x else ""))
        elif x["action"] == "slow_consumer":
            parts.append(f"output read at {x['bytes_per_s']} B/s")
        elif x["action"] == "kill_two":
            parts.append(f"SIGKILL slots {x['slots'][0]} and {x['slots'][1]} at once after step {x['step']}")
        else:
            parts.append(f"SIGKILL slot {x['slots'][0]} after step {x['step']}, then slot {x['slots'][1]} "
                         f"once the generation is revoked")
    return " + ".join(parts)


def piped(case):
    """Whether the case needs the launcher's output in a pipe it can stop reading."""
    return any(x["action"] in ("unread", "slow_consumer") for x in case["external"])


def only_slow(case):
    """A case whose only faults are slow ranks or a failing disk: it must need no recovery at all."""
    return (all(x["action"] == "unread" and "slot" not in x for x in case["external"]) and
            all(s.startswith(("slow:", "disk:")) for s in case["inject"]))


def disk_errors(case):
    """The checkpoint writes the case's disk faults fail (a slow disk fails none)."""
    n = 0
    for s in case["inject"]:
        if s.startswith("disk:") and ":error=" in s:
            n += int(s.rsplit(":writes=", 1)[1]) if ":writes=" in s else 1
    return n
