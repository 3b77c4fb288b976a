"""The jobs of tests/models/nccl_one_gpu_test.py: what each case runs (`ringfence run -n W --
train_mlp ...` with the one-GPU NCCL override), running one within the case's budget, and
reading what it left (output, --summary, --event-log, the workers' final state digests).
"""
import os
import re
import subprocess
import sys
import time

from rf_testlib import load_json, check, read_jsonl, wait_session

SKIP = 77
SHARE_ENV = {"RF_TEST_NCCL_SHARE_GPU": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
             "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo"}
FINAL = re.compile(r"^== train_\w+ slot (\d+) incarnation (\d+): step (-?\d+),.* world (\d+),.* state (x3:[0-9a-f]{32})\s*$",
                   re.M)
STEPS = 40
KILL = "kill:rank=1:step=20:phase=allreduce:after_chunks=1"  # inside step 20's all-reduce
STALL_FLOOR_S = 1.0  # ddp/stall_bound.h: the bound of a rank whose steps take milliseconds
MEMORY_BOUND = 64_000_000  # bytes
_deadline = [time.monotonic()]  # when the case's budget ends (set_budget)


class Ctx:
    def __init__(self, args, work):
        self.a = args
        self.work = work
        self.rehearse = args.rehearse
        self.device = ["--device", "cpu"] if args.rehearse else ["--device", "cuda"]


def set_budget(seconds):
    _deadline[0] = time.monotonic() + seconds


def seconds_left():
    return _deadline[0] - time.monotonic()


def left(cap):
    """A command's deadline: `cap` seconds, or what is left of the budget (at least 1)."""
    return max(1, min(cap, int(seconds_left())))


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(SKIP)


class Planned:
    """A job a case runs: `ringfence run -n world [launcher flags] -- train_mlp [device] --backend B ...`."""

    def __init__(self, name, world, backend, launcher=(), share=True, steps=STEPS, worker=()):
        self.name, self.world, self.backend = name, world, backend
        self.launcher, self.share, self.steps, self.worker = list(launcher), share, steps, list(worker)


GPU_HANG = "gpu_hang:rank=1:step=20"
STOP = "stop:rank=1:step=20"
HANG = "hang:rank=1:step=20"  # --rehearse's stand-in for gpu_hang
# generations: rank 1 drops its connections 10 times (nobody dies: the same processes live
# through 11 generations); rank 0 is slowed (200 ms a step) in three windows where memory is
# read: generation 1, generation 2 (the first after a recovery) and generation 11.
DROPS = [18] + [34 + 4 * k for k in range(9)]
WINDOWS = {"g1": 4, "g2": 20, "g11": 70}
GENERATION_STEPS = 84


def plan(case, world, rehearse):
    """The jobs of a case, in the order it runs them."""
    nccl = "ucx" if rehearse else "nccl"
    if case == "clean":
        return [Planned(f"nccl-clean-w{world}", world, nccl), Planned(f"ucx-clean-w{world}", world, "ucx", share=False)]
    if case == "kill":
        return [Planned(f"clean-w{world}", world, nccl), Planned(f"kill-w{world}", world, nccl, ["--inject", KILL])]
    if case == "shrink":
        return [Planned(f"shrink-w{world}", world, nccl, ["--inject", KILL, "--max-restarts", "0", "--min-world",
                                                          str(world - 1), "--join-window", "300ms"])]
    if case == "stop":
        return [Planned(f"stop-w{world}", world, nccl, ["--inject", STOP])]
    if case == "gpu-hang":
        return [Planned(f"gpu_hang-w{world}", world, nccl, ["--inject", HANG if rehearse else GPU_HANG])]
    if case == "generations":
        specs = [f"drop:rank=1:step={s}:phase=allreduce:after_chunks=1" for s in DROPS]
        specs += [f"slow:rank=0:step={s}:steps=12" for s in WINDOWS.values()]
        return [Planned(f"generations-w{world}", world, nccl, [x for sp in specs for x in ("--inject", sp)],
                        steps=GENERATION_STEPS)]
    if case == "contexts":  # without the override: NCCL's own rule, one rank per GPU
        return [Planned(f"contexts-w{world}", world, "nccl", share=False)]
    return []


class Job:
    """One `ringfence run` of train_mlp and what it left: output, summary, events, final lines."""

    def __init__(self, name, d, rc, out):
        self.name, self.dir, self.rc, self.out = name, d, rc, out
        self.summary = load_json(f"{d}/summary.json") or {}
        self.metrics = load_json(f"{d}/metrics.json") or {}
        self.events = read_jsonl(f"{d}/events.jsonl")
        self.finals = {}  # slot -> (incarnation, step, world, digest) of its last final line
        for slot, inc, step, w, digest in FINAL.findall(out):
            self.finals[int(slot)] = (int(inc), int(step), int(w), digest)
        digests = {v[3] for v in self.finals.values()}
        self.digest = digests.pop() if len(digests) == 1 else None

    def recoveries(self):
        return self.summary.get("recoveries", [])


def worker_flags(ctx, pj, d):
    # 2048 samples in batches of 96: 22 steps an epoch; --max-steps ends the job.
    return [*ctx.device, "--backend", pj.backend, "--synthetic", "2048", "--batch", "96", "--epochs",
            str(3 + pj.steps // 66), "--max-steps", str(pj.steps), "--lr", "0.01", "--log-interval", "10",
            "--metrics", f"{d}/metrics.json", *pj.worker]


def launcher_flags(pj, d):
    return ["run", "-n", str(pj.world), "--summary", f"{d}/summary.json", "--event-log", f"{d}/events.jsonl",
            *pj.launcher]


def job_command(ctx, pj, d):
    return [ctx.a.ringfence, *launcher_flags(pj, d), "--", ctx.a.train_mlp, *worker_flags(ctx, pj, d)]


def job_env(backend, share):
    env = os.environ.copy()
    env.pop("NCCL_HOSTID", None)  # one for the whole job would make every rank the same host again
    if backend == "nccl" and share:
        env.update(SHARE_ENV)
    return env


def start(cmd, log, env):
    out = open(log, "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    return p, out


def finish(p, out, deadline_s):
    """Waits for p (its process group SIGKILLed at the deadline or on interruption); its exit status or None."""
    try:
        return wait_session(p, deadline_s)
    finally:
        out.close()


def job(ctx, pj, cap=60, during=None):
    """Runs one planned job; `during(pid)` (optional) is called every ~0.25 s while it runs."""
    name, world, backend, share = pj.name, pj.world, pj.backend, pj.share
    d = f"{ctx.work}/{name}"
    os.makedirs(d)
    deadline_s = left(cap)
    p, out = start(job_command(ctx, pj, d), f"{d}/output.txt", job_env(backend, share))
    if during is None:
        rc = finish(p, out, deadline_s)
    else:
        t_end = time.monotonic() + deadline_s
        try:
            while p.poll() is None and time.monotonic() < t_end:
                during(p.pid)
                time.sleep(0.25)
        except BaseException:
            finish(p, out, 0)
            raise
        rc = finish(p, out, max(0.0, t_end - time.monotonic()))
    with open(f"{d}/output.txt") as f:
        j = Job(name, d, rc, f.read())
    check(rc == 0, f"{name}: launcher exit {'(over its ' + str(deadline_s) + ' s deadline)' if rc is None else rc}"
                   f" (see {d}/output.txt):\n{j.out[-2500:]}")
    check(j.summary.get("phase") == "DONE", f"{name}: job not DONE (phase {j.summary.get('phase')})")
    check("Duplicate GPU" not in j.out, f"{name}: NCCL said 'Duplicate GPU' (see {d}/output.txt)")
    if backend == "nccl" and share and world > 1 and not ctx.rehearse:
        warned = j.out.count("RF_TEST_NCCL_SHARE_GPU=1: ")
        check(warned >= world, f"{name}: {warned} worker(s) warned of the share override, want >= {world}")
    return j


def expect_end(j, slots, world, steps=STEPS):
    """Every slot in `slots` ended at the last step with `world`, all with one digest (also --metrics')."""
    check(sorted(j.finals) == sorted(slots), f"{j.name}: final lines from slots {sorted(j.finals)}, want {sorted(slots)}")
    check(all(s == steps - 1 and w == world for _, s, w, _ in j.finals.values()),
          f"{j.name}: not every worker ended at step {steps - 1} with world {world}: {j.finals}")
    check(j.digest is not None, f"{j.name}: replicas differ at the end: {j.finals}")
    m = j.metrics
    check(m.get("steps") == steps and m.get("world_size") == world and m.get("state_digest") == j.digest,
          f"{j.name}: --metrics {m} (want {steps} steps, world {world}, digest {j.digest})")


def fired(j):
    return [(x.get("spec"), x.get("slot"), x.get("step")) for x in j.summary.get("injected", []) if x.get("by") == "worker"]


def short(d):
    return (d or "?")[:8] + "…"


def children_of(pid):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(d))
    return out


def smi(query, extra=()):
    try:
        r = subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits", *extra],
                           capture_output=True, text=True, timeout=10)
        return [[x.strip() for x in l.split(",")] for l in r.stdout.splitlines() if l.strip()] if r.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        return []


def resident_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
