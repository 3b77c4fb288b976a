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
  shrink       the same kill without spares (--max-restarts 0 --min-world W-1): DONE at world
               W-1 in one recovery of one round, no failed ncclCommShrink. Every survivor either
               logs "shrink formed from g=N", or (expected with NCCL 2.28.9: a peer's death
               leaves its proxy's ncclRemoteError, which ncclCommRevoke keeps) the generation
               forms afresh on every survivor, one of which logged "not shrinkable"; the
               RESULT line says which
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
from rf_testlib import check, failures, run  # noqa: E402
from nccl_one_gpu_sanitizer import TOOLS, case_sanitizer, sanitizer_targets  # noqa: E402
from nccl_one_gpu_jobs import (  # noqa: E402
    Ctx, GENERATION_STEPS, KILL, MEMORY_BOUND, SHARE_ENV, SKIP, STALL_FLOOR_S, children_of, expect_end,
    fired, job, job_command, launcher_flags, left, plan, resident_bytes, set_budget, short, skip, smi,
    worker_flags)

CASES = ("clean", "kill", "shrink", "stop", "gpu-hang", "generations", "sanitizer", "contexts")
# Each case's whole budget (seconds) unless --budget says otherwise; below its ctest TIMEOUT.
BUDGET_S = {"clean": 100, "kill": 100, "shrink": 80, "stop": 80, "gpu-hang": 90, "generations": 150,
            "sanitizer": 280, "contexts": 80}
NO_GPU = re.compile(r"no CUDA device|no CUDA-capable device|this build has no CUDA|cudaGetDeviceCount|"
                    r"CUDA driver version is insufficient|cudaErrorNoDevice|cudaErrorInsufficientDriver")


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


SHRINK_FORMED = re.compile(r"g=(\d+) rank (\d+) cuda:\d+: shrink formed from g=(\d+) \((\d+) ranks\)")
FRESH_AFTER = re.compile(r"g=(\d+) rank (\d+) cuda:\d+: fresh ncclCommInitRankConfig \(the plan's choice; g=\d+'s "
                         r"communicator is torn down\)")
NOT_SHRINKABLE = re.compile(r"g=\d+ rank \d+ cuda:\d+: not shrinkable: it settled with NCCL error \d+")
SHRINK_FAILED = re.compile(r"ncclCommShrink of g=\d+ on cuda:\d+: .*")


def case_shrink(ctx, world):
    j = job(ctx, plan("shrink", world, ctx.rehearse)[0])
    expect_end(j, [s for s in range(world) if s != 1], world - 1)
    recs = j.recoveries()
    check(len(recs) == 1 and recs[0].get("finished") and recs[0].get("world") == world - 1
          and recs[0].get("rounds") == 1,
          f"{j.name}: recoveries {recs}, want one of one round, finished, world {world - 1}")
    how = "rehearsal: no NCCL"
    if not ctx.rehearse:
        failed = SHRINK_FAILED.findall(j.out)
        check(not failed, f"{j.name}: a shrink failed: {failed[:2]} (see {j.dir}/output.txt)")
        formed = SHRINK_FORMED.findall(j.out)
        fresh = FRESH_AFTER.findall(j.out)
        if formed:
            check(len(formed) == world - 1 and len({r for _, r, _, _ in formed}) == world - 1
                  and all(int(n) == world - 1 for _, _, _, n in formed) and not fresh,
                  f"{j.name}: 'shrink formed' on {formed}, fresh inits {fresh}: want every one of the {world - 1} "
                  f"survivors shrunk to {world - 1} ranks, none afresh")
            how = f"shrink formed on all {len(formed)} survivors (from g={formed[0][2]})"
        else:
            check(len(fresh) == world - 1 and len({r for _, r in fresh}) == world - 1,
                  f"{j.name}: no 'shrink formed', and {len(fresh)} fresh init(s) after the kill {fresh}: want one "
                  f"on each of the {world - 1} survivors (see {j.dir}/output.txt)")
            check(NOT_SHRINKABLE.search(j.out) is not None,
                  f"{j.name}: formed afresh, but no survivor logged why its communicator was not shrinkable")
            how = ("fresh init on every survivor: the revoked communicator kept NCCL's proxy error "
                   f"({(NOT_SHRINKABLE.search(j.out) or [''])[0] or '?'})")
    print(f"RESULT NCCL W={world} on one GPU, {KILL} with no spare (--max-restarts 0): "
          f"{'DONE' if j.summary.get('phase') == 'DONE' else 'NOT DONE'} at world {world - 1}, "
          f"{len(recs)} recovery of {recs[0].get('rounds') if recs else '-'} round(s); {how}")


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
    set_budget(a.budget or BUDGET_S[a.case])
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
