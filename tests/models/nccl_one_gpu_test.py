#!/usr/bin/env python3
"""W NCCL ranks on ONE GPU (ctest label gpu; docs/gpu.md, "W ranks on one GPU").

    nccl_one_gpu_test.py CASE [--world W] --ringfence PATH --train-mlp PATH
                         [--train-cnn PATH] [--test-nccl-gpu PATH] [--budget S]
                         [--rehearse | --dry-run] [--keep]

Every job is `ringfence run -n W -- train_mlp --device cuda --backend nccl` (synthetic data,
40 steps) with the test override RF_TEST_NCCL_SHARE_GPU=1 and NCCL over loopback sockets
(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo; each worker
gets its own NCCL_HOSTID): every rank is "another host" on the same GPU. Right for
correctness, meaningless for timing. Results are read from the launcher's --summary, its
--event-log and the workers' final state digests.

CASE
  clean        failure-free; at W = 2 the final digest equals the UCX fallback's (same flags)
  kill         rank 1 SIGKILLed inside step 20's all-reduce, replaced: DONE, bitwise equal to
               the failure-free NCCL run
  shrink       the same kill without spares (--max-restarts 0 --min-world W-1): the survivors
               go on with ncclCommShrink (in the log), DONE at world W-1
  stop         rank 1 SIGSTOPped at step 20; and
  gpu-hang     rank 1's GPU stuck at step 20 (--inject gpu_hang): the culprit is evicted (cause
               lease_expired, resp. gpu_stuck) within 2 stall bounds + 1 s of the fault, in one
               recovery round, and the job ends DONE
  generations  10 induced generations (rank 1 drops its connections 10 times, nobody dies):
               each worker's device memory after them within 64 MB of the first generation's
               (nvidia-smi --query-compute-apps per worker pid; the whole GPU's memory.used,
               within W x 64 MB, where nvidia-smi lists no worker pid)
  sanitizer    compute-sanitizer memcheck, racecheck and synccheck on test_nccl_gpu (every
               case) and one train_cnn step: 0 errors. racecheck and synccheck leave out
               NCCL's own kernels (kns=nccl) where compute-sanitizer can. A compute-sanitizer
               that is missing or refuses the device: SKIPPED with its words, never passed
  contexts     every rank holds a CUDA context on its own GPU only, without the override
               (nvidia-smi): meaningful with several GPUs; with one, SKIPPED saying why

Without a GPU it prints "SKIPPED: no GPU: <reason>" and exits 77 (ctest: skipped, never
passed). --dry-run needs no GPU and starts no job: it prints every command the case would
run (its jobs with their environment, or compute-sanitizer's runs) and checks what can be
checked without one: the launcher accepts each job's flags and --inject specs (run with a
program that does not exist, it must refuse only the program), the worker its flags (with
--help), and each other program runs. --rehearse runs the cases' machinery on the CPU instead (--device cpu --backend ucx,
`hang` for gpu_hang, resident memory for device memory, no shrink log, no sanitizer): a check
of this script without a GPU, never a result. Every command has a deadline and its process
group is SIGKILLed and reaped when it passes (a launcher's workers die with it by
PDEATHSIG); --budget (seconds) bounds the whole case. "RESULT " lines are the key figures
scripts/gpu-check copies into its summary.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rf_testlib import load_json, check, failures, read_jsonl, run  # noqa: E402

SKIP = 77
CASES = ("clean", "kill", "shrink", "stop", "gpu-hang", "generations", "sanitizer", "contexts")
# Each case's whole budget (seconds) unless --budget says otherwise; below its ctest TIMEOUT.
BUDGET_S = {"clean": 100, "kill": 100, "shrink": 80, "stop": 80, "gpu-hang": 90, "generations": 150,
            "sanitizer": 280, "contexts": 80}
SHARE_ENV = {"RF_TEST_NCCL_SHARE_GPU": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
             "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo"}
NO_GPU = re.compile(r"no CUDA device|no CUDA-capable device|this build has no CUDA|cudaGetDeviceCount|"
                    r"CUDA driver version is insufficient|cudaErrorNoDevice|cudaErrorInsufficientDriver")
FINAL = re.compile(r"^== train_\w+ slot (\d+) incarnation (\d+): step (-?\d+),.* world (\d+),.* state (x3:[0-9a-f]{32})\s*$",
                   re.M)
STEPS = 40
KILL = "kill:rank=1:step=20:phase=allreduce:after_chunks=1"  # inside step 20's all-reduce
STALL_FLOOR_S = 1.0  # ddp/stall_bound.h: the bound of a rank whose steps take milliseconds
MEMORY_BOUND = 64_000_000  # bytes
T_END = time.monotonic()


class Ctx:
    def __init__(self, args, work):
        self.a = args
        self.work = work
        self.rehearse = args.rehearse
        self.device = ["--device", "cpu"] if args.rehearse else ["--device", "cuda"]


def left(cap):
    return max(1, min(cap, int(T_END - time.monotonic())))


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(SKIP)


def no_gpu_reason(ctx):
    """Why this machine cannot run --device cuda, or None; exits 1 when the probe fails otherwise."""
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        gpus = [l for l in smi.stdout.splitlines() if l.startswith("GPU ")]
        if smi.returncode != 0 or not gpus:
            return f"nvidia-smi -L: exit {smi.returncode}, {(smi.stderr or smi.stdout).strip()[:200] or 'no GPU listed'}"
    except FileNotFoundError:
        return "nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return "nvidia-smi -L did not answer in 30 s"
    rc, out = run([ctx.a.train_mlp, "--device", "cuda", "--synthetic", "64", "--batch", "32", "--max-steps", "0",
                   "--log-interval", "0"], f"{ctx.work}/probe.txt", left(120))
    if rc == 0:
        return None
    m = NO_GPU.search(out)
    if rc is not None and m:
        line = next(l for l in out.splitlines() if m.group(0) in l)
        return f"{os.path.basename(ctx.a.train_mlp)} --device cuda: {line.strip()[:300]}"
    print(f"FAIL: the probe `{ctx.a.train_mlp} --device cuda --max-steps 0` exited {rc} "
          f"({'over its deadline' if rc is None else 'not for want of a GPU'}):\n{out[-3000:]}")
    sys.exit(1)


def gpu_count():
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return len([l for l in smi.stdout.splitlines() if l.startswith("GPU ")])
    except (OSError, subprocess.TimeoutExpired):
        return 0


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
        rc = p.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        rc = None
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    finally:
        out.close()
    return rc


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


# --- the cases ---------------------------------------------------------------------------

def case_clean(ctx, world):
    nccl, ucx = (job(ctx, pj) for pj in plan("clean", world, ctx.rehearse))
    for j in (nccl, ucx):
        expect_end(j, range(world), world)
        check(j.recoveries() == [], f"{j.name}: recoveries {j.recoveries()}, want none")
    same = nccl.digest is not None and nccl.digest == ucx.digest
    if world == 2:  # a + b is b + a: at W = 2 every all-reduce gives the same bits either way
        check(same, f"W=2: NCCL's final state {nccl.digest} is not the UCX fallback's {ucx.digest}")
    print(f"RESULT NCCL W={world} on one GPU, failure-free: {'DONE' if nccl.digest else 'FAILED'}; digest "
          f"{'equal to' if same else 'different from'} the UCX fallback's ({short(ucx.digest)})"
          f"{'' if world == 2 else ' (at W > 2 the summation orders differ: not required)'}")


def case_kill(ctx, world):
    clean, kill = plan("kill", world, ctx.rehearse)
    ref = job(ctx, clean)
    expect_end(ref, range(world), world)
    got = job(ctx, kill)
    expect_end(got, range(world), world)
    check(fired(got) == [(KILL, 1, 20)], f"{got.name}: faults fired {fired(got)}, want {[(KILL, 1, 20)]}")
    recs = got.recoveries()
    check(len(recs) == 1 and recs[0].get("finished") and recs[0].get("world") == world,
          f"{got.name}: recoveries {recs}, want one, finished, world {world}")
    same = ref.digest is not None and got.digest == ref.digest
    check(same, f"{got.name}: final state {got.digest} differs from the failure-free run's {ref.digest}")
    ms = recs[0].get("total_ms") if len(recs) == 1 else None
    took = f" ({recs[0].get('cause')}, {ms:.0f} ms)" if isinstance(ms, (int, float)) else ""
    print(f"RESULT NCCL W={world} on one GPU, {KILL}, replaced: "
          f"{'DONE' if got.summary.get('phase') == 'DONE' else 'NOT DONE'}, {len(recs)} recovery{took}, final digest "
          f"{'equal to' if same else 'DIFFERENT from'} the failure-free run's ({short(ref.digest)})")


def case_shrink(ctx, world):
    j = job(ctx, plan("shrink", world, ctx.rehearse)[0])
    expect_end(j, [s for s in range(world) if s != 1], world - 1)
    recs = j.recoveries()
    check(len(recs) == 1 and recs[0].get("finished") and recs[0].get("world") == world - 1,
          f"{j.name}: recoveries {recs}, want one, finished, world {world - 1}")
    shrinks = sorted(set(re.findall(r"ncclCommShrink of g=\d+", j.out)))
    if not ctx.rehearse:
        check(shrinks, f"{j.name}: no 'ncclCommShrink' in the log (see {j.dir}/output.txt)")
    print(f"RESULT NCCL W={world} on one GPU, {KILL} with no spare (--max-restarts 0): "
          f"{'DONE' if j.summary.get('phase') == 'DONE' else 'NOT DONE'} at world {world - 1}; "
          f"{len(re.findall(r'ncclCommShrink of g=', j.out))} ncclCommShrink line(s) ({', '.join(shrinks) or 'none'})")


def stall_bound_s(j):
    """The largest stall bound the coordinator's events name ('stall bound X s'), else the floor."""
    seen = [float(x) for e in j.events for x in re.findall(r"stall bound ([0-9.]+) s", e.get("detail", ""))]
    return (max(seen), "from the event log") if seen else (STALL_FLOOR_S, "the floor: no event named one")


def case_evicted(ctx, case, world, causes, what):
    pj = plan(case, world, ctx.rehearse)[0]
    spec = pj.launcher[pj.launcher.index("--inject") + 1]
    j = job(ctx, pj)
    expect_end(j, range(world), world)
    inj = next((e for e in j.events if e.get("event") == "injected" and e.get("detail") == spec), None)
    check(inj is not None, f"{j.name}: no 'injected' event for {spec} in the event log")
    ev = latency = None
    if inj:
        who = inj.get("worker") or {}
        after = [e for e in j.events if e.get("event") in ("evict", "fail") and e.get("ts_us", 0) >= inj["ts_us"]]
        ev = next((e for e in after if (e.get("worker") or {}) == who), None)
        check(ev is not None, f"{j.name}: the culprit {who} was never evicted or failed after the fault")
        # Nobody else first: a healthy rank blamed for the culprit's fault is the failure to catch.
        check(not after or after[0] is ev, f"{j.name}: the first to go after the fault was {after[0] if after else None}, "
                                           f"not the culprit {who}")
    bound, said = stall_bound_s(j)
    allowed = 2 * bound + 1.0
    if ev:
        latency = (ev["ts_us"] - inj["ts_us"]) / 1e6
        check(ev.get("cause") in causes, f"{j.name}: the culprit's {ev.get('event')} has cause {ev.get('cause')}, "
                                         f"want {' or '.join(causes)}")
        check(latency <= allowed, f"{j.name}: the culprit went {latency:.2f} s after the fault, over 2 stall bounds + "
                                  f"1 s = {allowed:.1f} s (bound {bound:.2f} s, {said})")
    recs = j.recoveries()
    check(len(recs) == 1, f"{j.name}: {len(recs)} recoveries, want one: {recs}")
    if recs:
        r = recs[0]
        check(r.get("rounds") == 1 and r.get("finished") and r.get("cause") in causes,
              f"{j.name}: recovery {r}, want one round, finished, cause {' or '.join(causes)}")
    print(f"RESULT NCCL W={world} on one GPU, {spec} ({what}): culprit "
          f"{ev.get('event') + ' (' + str(ev.get('cause')) + ')' if ev else 'NEVER evicted'}"
          f"{f' {latency:.2f} s after the fault' if latency is not None else ''} (allowed {allowed:.1f} s: 2 x "
          f"{bound:.2f} s + 1 s, {said}); {len(recs)} recovery, rounds "
          f"{recs[0].get('rounds') if recs else '-'}; {'DONE' if j.summary.get('phase') == 'DONE' else 'NOT DONE'}")


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


def case_generations(ctx, world):
    samples = []  # (wall_s, {pid: bytes}, whole GPU bytes or None)

    def sample(launcher):
        workers = set(children_of(launcher))
        t = time.time()
        per = {}
        total = None
        if ctx.rehearse:
            per = {p: b for p in workers if (b := resident_bytes(p)) is not None}
        else:
            for row in smi("compute-apps=pid,used_memory"):
                if len(row) == 2 and row[0].isdigit() and int(row[0]) in workers and row[1].isdigit():
                    per[int(row[0])] = int(row[1]) * 1048576
            gpu = smi("gpu=memory.used")
            if gpu and all(r and r[0].isdigit() for r in gpu):
                total = sum(int(r[0]) for r in gpu) * 1048576
        samples.append((t, per, total))

    j = job(ctx, plan("generations", world, ctx.rehearse)[0], cap=120, during=sample)
    expect_end(j, range(world), world, GENERATION_STEPS)
    recs = j.recoveries()
    gens = j.summary.get("generations")
    check(len(recs) >= 10 and isinstance(gens, int) and gens >= 11,
          f"{j.name}: {len(recs)} recoveries, {gens} generations: want 10 and 11 (faults fired: {fired(j)})")
    # Each window: from 0.5 s after its generation ran to the next fault (or the end).
    running = sorted((e["ts_us"] / 1e6, e.get("g")) for e in j.events if e.get("event") == "running")
    faults = sorted(e["ts_us"] / 1e6 for e in j.events if e.get("event") in ("injected",)
                    and str(e.get("detail", "")).startswith("drop:"))
    end = next((e["ts_us"] / 1e6 for e in j.events if e.get("event") == "done"), float("inf"))
    span = {}
    for name, g in (("g1", 1), ("g2", 2), ("g11", 11)):
        at = next((t for t, gg in running if gg == g), None)
        if at is None:
            check(False, f"{j.name}: generation {g} never ran (running events: {running})")
            continue
        stop = min([f for f in faults if f > at] + [end])
        span[name] = (at + 0.5, stop)

    def read(name, whole):
        lo, hi = span.get(name, (0, -1))
        inside = [s for s in samples if lo <= s[0] <= hi]
        if whole:
            vals = [s[2] for s in inside if s[2] is not None]
            return statistics.median(vals) if vals else None, len(vals)
        per = {}
        for _, p, _ in inside:
            for pid, b in p.items():
                per.setdefault(pid, []).append(b)
        return {pid: statistics.median(v) for pid, v in per.items()}, len(inside)

    per_process = any(s[1] for s in samples)
    mib = 1048576
    if per_process:
        first, n1 = read("g1", False)
        second, _ = read("g2", False)
        last, n11 = read("g11", False)
        pids = sorted(set(first) & set(last))
        check(n1 > 0 and n11 > 0 and pids, f"{j.name}: no memory sample in generation 1 ({n1}) or 11 ({n11}) "
                                           f"for the same workers (windows {span})")
        growth = {p: last[p] - first[p] for p in pids}
        worst = max(growth.values()) if growth else None
        how = "resident memory (rehearsal: not checked)" if ctx.rehearse else "device memory per worker (nvidia-smi)"
        if not ctx.rehearse and worst is not None:
            check(worst <= MEMORY_BOUND, f"{j.name}: a worker's device memory grew {worst / mib:.1f} MiB over 10 "
                                         f"generations (bound 64 MB): {growth}")
        desc = ", ".join(f"pid {p}: {first[p] / mib:.0f} -> {second.get(p, float('nan')) / mib:.0f} -> "
                         f"{last[p] / mib:.0f} MiB" for p in pids)
    else:
        first, n1 = read("g1", True)
        second, _ = read("g2", True)
        last, n11 = read("g11", True)
        check(first is not None and last is not None,
              f"{j.name}: nvidia-smi listed no worker pid and no memory.used in generation 1 ({n1}) or 11 ({n11})")
        worst = (last - first) if first is not None and last is not None else None
        how = "the whole GPU's memory.used (nvidia-smi listed no worker pid)"
        if worst is not None:
            check(worst <= world * MEMORY_BOUND, f"{j.name}: the GPU's memory grew {worst / mib:.1f} MiB over 10 "
                                                 f"generations (bound {world} x 64 MB)")
        desc = (f"{first / mib:.0f} -> {second / mib if second else float('nan'):.0f} -> {last / mib:.0f} MiB"
                if first is not None and last is not None else "no reading")
    print(f"RESULT NCCL W={world} on one GPU, 10 induced generations ({len(recs)} recoveries): {how} in generations "
          f"1 -> 2 -> 11: {desc}; worst growth "
          f"{'?' if worst is None else f'{worst / mib:.1f} MiB'} (bound 64 MB{' each' if per_process else ' x W'})")


def find_sanitizer():
    path = shutil.which("compute-sanitizer")
    if path:
        return path
    for p in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if os.path.exists(p):
            return p
    return None


REFUSED = re.compile(r"Device not supported|not supported on this (platform|device)|Unable to (find|load|initialize)|"
                     r"Target application terminated before first instrumented API call|"
                     r"Error: .*(injection|driver|profiling)", re.I)


TOOLS = ("memcheck", "racecheck", "synccheck")


def sanitizer_targets(ctx):
    return [("test_nccl_gpu", [ctx.a.test_nccl_gpu]),
            ("train_cnn, one step", [ctx.a.train_cnn, "--device", "cuda", "--synthetic", "64", "--batch", "32",
                                     "--max-steps", "1", "--log-interval", "0"])]


def case_sanitizer(ctx):
    cs = find_sanitizer()
    if cs is None:
        skip("compute-sanitizer: not found (PATH, /usr/local/cuda/bin)")
    if not (ctx.a.test_nccl_gpu and ctx.a.train_cnn):
        sys.exit("sanitizer: needs --test-nccl-gpu and --train-cnn")
    _, help_text = run([cs, "--help"], f"{ctx.work}/sanitizer-help.txt", left(30))
    opts = ["--error-exitcode", "86", "--print-limit", "20"]
    if "--report-api-errors" in help_text:
        opts += ["--report-api-errors", "no"]  # NCCL and CUDA probe calls that may fail; we check every call
    exclude = ["--kernel-name-exclude", "kns=nccl"] if "--kernel-name-exclude" in help_text else []
    targets = sanitizer_targets(ctx)
    refused, rows, notes = [], [], []
    runs = [(tool, name, cmd) for tool in TOOLS for name, cmd in targets]
    for i, (tool, name, cmd) in enumerate(runs):
        extra = exclude if tool != "memcheck" else []
        log = f"{ctx.work}/{tool}-{name.split(',')[0]}.txt"
        share = max(10, int((T_END - time.monotonic()) / (len(runs) - i)))  # what is left, shared
        rc, out = run([cs, "--tool", tool, *opts, *extra, *cmd], log, left(share))
        if rc is None:
            check(False, f"sanitizer: {tool} on {name}: over its {share} s share of the budget:\n{out[-1500:]}")
            rows.append(f"{tool} {name}: over {share} s")
            continue
        m = re.search(r"ERROR SUMMARY: (\d+) error", out)
        if m is None:
            r = REFUSED.search(out)
            if r:
                refused.append(f"{tool} on {name}: {r.group(0)}")
                continue
            check(False, f"sanitizer: {tool} on {name}: exit {rc}, no ERROR SUMMARY:\n{out[-2000:]}")
            rows.append(f"{tool} {name}: no summary")
            continue
        errors = int(m.group(1))
        check(errors == 0, f"sanitizer: {tool} on {name}: {errors} error(s):\n{out[-3000:]}")
        rows.append(f"{tool} {name}: {errors} errors")
        if errors == 0 and rc != 0:
            # Its own status under the tool. test_nccl_gpu bounds how late a stalled or aborted
            # all-reduce fails (100 ms, 10 ms) for uninstrumented runs (gpu-tests checks them):
            # a doctest failure there is noted, not counted. Anything else is a failure.
            tests = re.search(r"\[doctest\] test cases: *(\d+) \| *(\d+) passed \| *(\d+) failed", out)
            if name == "test_nccl_gpu" and tests:
                notes.append(f"under {tool}, test_nccl_gpu's own checks: {tests.group(2)} of {tests.group(1)} "
                             f"cases passed (timing bounds are for uninstrumented runs)")
            else:
                check(False, f"sanitizer: {tool} on {name}: 0 errors but the program exited {rc}:\n{out[-2000:]}")
    note = " (racecheck and synccheck leave out NCCL's kernels, kns=nccl)" if exclude else ""
    if refused and not failures:
        skip(f"compute-sanitizer refuses this machine: {'; '.join(refused)}")
    for n in notes:
        print(f"NOTE: {n}")
    print(f"RESULT compute-sanitizer{note}: {'; '.join(rows)}{'; ' + '; '.join(notes) if notes else ''}")


def case_contexts(ctx, world):
    gpus = 0 if ctx.rehearse else gpu_count()
    if gpus < 2:
        skip(f"{gpus} GPU(s): whether each rank's CUDA context is on its own GPU only means something with several "
             f"(here every rank shares the one)")
    world = min(max(world, 2), gpus)
    seen = {}  # pid -> GPUs (bus ids) nvidia-smi showed it on

    def sample(launcher):
        workers = set(children_of(launcher))
        for row in smi("compute-apps=pid,gpu_bus_id"):
            if len(row) == 2 and row[0].isdigit() and int(row[0]) in workers:
                seen.setdefault(int(row[0]), set()).add(row[1])

    j = job(ctx, plan("contexts", world, ctx.rehearse)[0], during=sample)
    expect_end(j, range(world), world)
    if not seen:
        skip("nvidia-smi lists none of the workers' pids (another PID namespace?): nothing to tell")
    check(len(seen) == world, f"{j.name}: nvidia-smi saw {len(seen)} of the {world} workers: {seen}")
    check(all(len(b) == 1 for b in seen.values()), f"{j.name}: a worker holds contexts on several GPUs: {seen}")
    buses = [next(iter(b)) for b in seen.values() if len(b) == 1]
    check(len(set(buses)) == len(buses), f"{j.name}: two workers on one GPU: {seen}")
    print(f"RESULT NCCL W={world} on {gpus} GPUs: each worker's CUDA context on one GPU of its own: "
          f"{'yes' if not failures else 'NO'} ({seen})")


def dry_run(ctx, case, world):
    """Prints what the case would run and checks what needs no GPU; 0 when all is well."""
    bad = []

    def expect(cmd, ok, what):
        rc, out = run(cmd, f"{ctx.work}/dry.txt", left(30))
        if not ok(rc, out):
            bad.append(f"{what}: exit {rc}: {out.strip()[-600:]}")

    if case == "sanitizer":
        for p in (ctx.a.train_cnn, ctx.a.test_nccl_gpu):
            if not p:
                bad.append("sanitizer: needs --train-cnn and --test-nccl-gpu")
        for tool in TOOLS:
            for name, cmd in sanitizer_targets(ctx) if not bad else []:
                extra = " [--kernel-name-exclude kns=nccl]" if tool != "memcheck" else ""
                print(f"  compute-sanitizer --tool {tool} --error-exitcode 86 --print-limit 20 [--report-api-errors no]{extra} "
                      f"{' '.join(cmd)}")
        if not bad:
            # test_nccl_gpu runs (without a GPU it says so and exits 77); train_cnn takes the flags.
            expect([ctx.a.test_nccl_gpu, "--help"], lambda rc, out: rc in (0, SKIP), "test_nccl_gpu --help")
            expect([*sanitizer_targets(ctx)[1][1], "--help"], lambda rc, out: rc == 0, "train_cnn's flags (--help)")
    jobs = plan(case, world if case != "contexts" else 2, ctx.rehearse)
    for pj in jobs:
        d = f"{ctx.work}/{pj.name}"
        env = {k: v for k, v in SHARE_ENV.items()} if pj.backend == "nccl" and pj.share else {}
        line = f"{' '.join(f'{k}={v}' for k, v in env.items())}{' ' if env else ''}{' '.join(job_command(ctx, pj, d))}"
        print("  " + line.replace(ctx.work, "$WORK"))
        # The launcher checks its flags and every --inject spec before anything starts, then the
        # program: one that does not exist must be the only thing it refuses.
        nowhere = "/nonexistent/nccl_one_gpu_dry_run"
        expect([ctx.a.ringfence, *launcher_flags(pj, d), "--", nowhere],
               lambda rc, out: rc == 2 and f"cannot run '{nowhere}'" in out, f"{pj.name}: the launcher's flags")
        expect([ctx.a.train_mlp, *worker_flags(ctx, pj, d), "--help"], lambda rc, out: rc == 0,
               f"{pj.name}: the worker's flags (--help)")
    for b in bad:
        print(f"FAIL: {b}")
    print(f"dry run of {case}{f' W={jobs[0].world}' if jobs else ''}: {len(jobs)} job(s), "
          f"{'ok' if not bad else f'{len(bad)} problem(s)'}")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("case", choices=CASES)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--ringfence", required=True)
    p.add_argument("--train-mlp", required=True)
    p.add_argument("--train-cnn")
    p.add_argument("--test-nccl-gpu")
    p.add_argument("--budget", type=int)
    p.add_argument("--rehearse", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    a = p.parse_args()
    if a.world < 2:
        p.error("--world: at least 2")
    if a.case == "shrink" and a.world < 2:
        p.error("shrink: --world at least 2")
    global T_END
    T_END = time.monotonic() + (a.budget or BUDGET_S[a.case])
    # A runner's time limit (scripts/gpu-check's `timeout`) sends SIGTERM: exit through
    # finish()/rf_testlib.run, which kill the running command's process group on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = tempfile.mkdtemp(prefix=f"nccl_one_gpu_{a.case}_")
    ctx = Ctx(a, work)
    code = 0
    try:
        if a.dry_run:
            return dry_run(ctx, a.case, a.world)
        if a.rehearse:
            if a.case in ("sanitizer",):
                skip("--rehearse: compute-sanitizer needs a GPU")
            print(f"REHEARSAL on the CPU (--device cpu --backend ucx): checks this script, proves nothing of NCCL")
        else:
            why = no_gpu_reason(ctx)
            if why:
                skip(f"no GPU: {why}")
        if a.case == "clean":
            case_clean(ctx, a.world)
        elif a.case == "kill":
            case_kill(ctx, a.world)
        elif a.case == "shrink":
            case_shrink(ctx, a.world)
        elif a.case == "stop":
            case_evicted(ctx, "stop", a.world, ("lease_expired",), "SIGSTOP")
        elif a.case == "gpu-hang":
            if a.rehearse:
                case_evicted(ctx, "gpu-hang", a.world, ("hung", "wedged"), "rehearsal: a hung thread")
            else:
                case_evicted(ctx, "gpu-hang", a.world, ("gpu_stuck",), "its GPU stuck")
        elif a.case == "generations":
            case_generations(ctx, a.world)
        elif a.case == "sanitizer":
            case_sanitizer(ctx)
        else:
            case_contexts(ctx, a.world)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if code not in (0, SKIP):
            raise
    finally:
        if failures or a.keep:
            print(f"(work dir kept: {work})")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if code == SKIP:
        return SKIP
    print("FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
