#!/usr/bin/env python3
"""train_mlp / train_cnn on a GPU, as a user runs them (ctest label gpu; docs/gpu.md).

    gpu_programs_test.py accuracy PROGRAM CPU_THREADS
        One epoch of Fashion-MNIST on the CPU (--threads CPU_THREADS, 0: every core) and twice with
        --device cuda: the GPU's test accuracy is within 1 point of the CPU's, the two GPU
        runs end with the same state digest (bitwise), and that digest is not the CPU's
        (cuBLAS sums in another order than the CPU GEMM: equal bits would mean the "GPU"
        run never left the CPU).
    gpu_programs_test.py ucx-kill RINGFENCE TRAIN_MLP W
        `ringfence run -n W -- train_mlp --device cuda --backend ucx` (W processes sharing
        the GPUs round-robin; synthetic data, 40 steps), without faults and with rank 1
        SIGKILLed in the middle of step 20's all-reduce: both DONE, every replica equal, the
        fault fired and one recovery replaced the rank, and the final state is bitwise the
        failure-free run's.
    gpu_programs_test.py nccl-w1 RINGFENCE TRAIN_MLP
        `ringfence run -n 1` with --backend nccl and with --backend ucx: both DONE, and the
        same final state (at W = 1 an all-reduce is the identity, whichever backend).
    gpu_programs_test.py cuda-graph PROGRAM
        By hand with --device cuda, synthetic data whose epochs end in a short batch: eager,
        and with --cuda-graph (the step captured and replayed, "== cuda graph: 1 captured,
        N replayed" with N > 0), the same final state bitwise; and --cuda-graph stopped at
        a checkpoint and resumed (a new process: captured again) ends with it too.

Without a GPU it prints "SKIPPED: no GPU: <reason>" and exits 77 (ctest: skipped, never
passed). "No GPU" is `nvidia-smi -L` listing none, or the program itself refusing
`--device cuda` because there is no CUDA device or the build has no CUDA; any other
failure of that probe is a failure of the test. Every command has a deadline; on expiry
its process group is SIGKILLed (a launcher's workers die with it by PDEATHSIG). Lines
starting with "RESULT " are the key figures scripts/gpu-check copies into its summary.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from rf_testlib import load_json, check, failures, run  # noqa: E402

SKIP = 77
# What the programs say when --device cuda cannot be had on this machine (core/cuda_runtime.h:
# runtime(cuda:i) without a device, cuda_unavailable_reason(), a build without CUDA).
NO_GPU = re.compile(r"no CUDA device|no CUDA-capable device|this build has no CUDA|cudaGetDeviceCount|"
                    r"CUDA driver version is insufficient|cudaErrorNoDevice|cudaErrorInsufficientDriver")
FINAL = re.compile(r"^== train_\w+ slot (\d+) incarnation (\d+): step (-?\d+),.* world (\d+),.* state (x3:[0-9a-f]{32})\s*$",
                   re.M)
KILL = "kill:rank=1:step=20:phase=allreduce:after_chunks=1"  # fires once a chunk of step 20's all-reduce went through
STEPS = 40
# One deadline for the whole test, below its ctest TIMEOUT (tests/models/CMakeLists.txt),
# shared by its runs: a hang fails here, with the tail of the output, not in ctest.
BUDGET_S = {"accuracy": 400, "ucx-kill": 340, "nccl-w1": 310, "cuda-graph": 100}
GRAPH_LINE = re.compile(r"^== cuda graph: (\d+) captured, (\d+) replayed, (\d+) eager steps$", re.M)
T_END = time.monotonic()


def deadline(s):
    return max(1, min(s, int(T_END - time.monotonic())))


def no_gpu_reason(program, tmp):
    """Why this machine cannot run --device cuda, or None when it can; exits 1 when the
    probe fails for another reason (that is a failure, not a missing GPU)."""
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        gpus = [l for l in smi.stdout.splitlines() if l.startswith("GPU ")]
        if smi.returncode != 0 or not gpus:
            return f"nvidia-smi -L: exit {smi.returncode}, {(smi.stderr or smi.stdout).strip()[:200] or 'no GPU listed'}"
    except FileNotFoundError:
        return "nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return "nvidia-smi -L did not answer in 30 s"
    rc, out = run([program, "--device", "cuda", "--synthetic", "64", "--batch", "32", "--max-steps", "0",
                   "--log-interval", "0"], f"{tmp}/probe.txt", deadline(120))
    if rc == 0:
        return None
    m = NO_GPU.search(out)
    if rc is not None and m:
        line = next(l for l in out.splitlines() if m.group(0) in l)
        return f"{os.path.basename(program)} --device cuda: {line.strip()[:300]}"
    print(f"FAIL: the probe `{program} --device cuda --max-steps 0` exited {rc} "
          f"({'over its deadline' if rc is None else 'not for want of a GPU'}):\n{out[-3000:]}")
    sys.exit(1)



def train(name, cmd, work, deadline_s):
    """One program run with --metrics; returns its metrics (None when it failed)."""
    metrics = f"{work}/{name}.json"
    deadline_s = deadline(deadline_s)
    rc, out = run(cmd + ["--metrics", metrics], f"{work}/{name}.txt", deadline_s)
    check(rc == 0, f"{name}: exit {'(over its ' + str(deadline_s) + ' s deadline)' if rc is None else rc}: "
                   f"{' '.join(cmd)}\n{out[-2000:]}")
    m = load_json(metrics) if rc == 0 else None
    check(rc != 0 or m is not None, f"{name}: no --metrics file")
    return m


def accuracy(program, cpu_threads, work):
    model = os.path.basename(program).replace("train_", "")
    common = [program, "--epochs", "1", "--log-interval", "100"]
    cpu_threads = cpu_threads if cpu_threads != "0" else str(os.cpu_count() or 1)
    cpu = train("cpu", common + ["--device", "cpu", "--threads", cpu_threads], work, 240)
    gpu = [train(f"gpu{i}", common + ["--device", "cuda"], work, 180) for i in (1, 2)]
    if cpu is None or None in gpu:
        return
    for m in (cpu, *gpu):
        check(m["steps"] == cpu["steps"] and m["steps"] > 0, f"steps differ: cpu {cpu['steps']}, this run {m['steps']}")
    diff = 100 * (gpu[0]["test_accuracy"] - cpu["test_accuracy"])
    check(abs(diff) <= 1.0, f"GPU test accuracy {gpu[0]['test_accuracy']:.4f} is {diff:+.2f} points from the CPU's "
                            f"{cpu['test_accuracy']:.4f} (bar: 1 point)")
    same = gpu[0]["state_digest"] == gpu[1]["state_digest"]
    check(same, f"two GPU runs differ: {gpu[0]['state_digest']} vs {gpu[1]['state_digest']}")
    check(gpu[0]["state_digest"] != cpu["state_digest"],
          f"the GPU run's state is the CPU run's ({cpu['state_digest']}): --device cuda did not compute on the GPU")
    print(f"RESULT {model} one epoch: test accuracy GPU {100 * gpu[0]['test_accuracy']:.2f} %, CPU "
          f"{100 * cpu['test_accuracy']:.2f} % ({diff:+.2f} points); two GPU runs' digests "
          f"{'equal' if same else 'DIFFER'} ({gpu[0]['state_digest'][:8]}…); GPU {gpu[0]['samples_per_sec']:.0f} "
          f"samples/s, CPU ({cpu_threads} threads) {cpu['samples_per_sec']:.0f} samples/s")


def job(ringfence, train_mlp, work, name, world, worker_flags, launcher_flags=(), deadline_s=150):
    """One `ringfence run` of train_mlp on synthetic data; returns (final digest or None, summary, metrics)."""
    d = f"{work}/{name}"
    os.makedirs(d)
    deadline_s = deadline(deadline_s)
    cmd = [ringfence, "run", "-n", str(world), "--summary", f"{d}/summary.json", *launcher_flags, "--",
           train_mlp, *worker_flags, "--synthetic", "2048", "--batch", "96", "--epochs", "3",
           "--max-steps", str(STEPS), "--lr", "0.01", "--log-interval", "10", "--metrics", f"{d}/metrics.json"]
    rc, out = run(cmd, f"{d}/output.txt", deadline_s)
    summary, metrics = load_json(f"{d}/summary.json"), load_json(f"{d}/metrics.json")
    check(rc == 0, f"{name}: launcher exit {'(over its ' + str(deadline_s) + ' s deadline)' if rc is None else rc}"
                   f" (see {d}/output.txt):\n{out[-2500:]}")
    check(summary is not None and summary.get("phase") == "DONE", f"{name}: job not DONE")
    live = {}  # slot -> (step, world, digest) of its last final line (a killed worker prints none)
    for slot, _inc, step, w, digest in FINAL.findall(out):
        live[int(slot)] = (int(step), int(w), digest)
    check(sorted(live) == list(range(world)), f"{name}: final lines from slots {sorted(live)}, want 0..{world - 1}")
    check(all(s == STEPS - 1 and w == world for s, w, _ in live.values()),
          f"{name}: not every worker ended at step {STEPS - 1} with world {world}: {live}")
    digests = {v[2] for v in live.values()}
    check(len(digests) == 1, f"{name}: replicas differ at the end: {digests}")
    check(metrics is not None, f"{name}: no --metrics file")
    if metrics:
        check(metrics["steps"] == STEPS and metrics["world_size"] == world, f"{name}: metrics {metrics}")
        check(digests == {metrics["state_digest"]}, f"{name}: metrics digest {metrics['state_digest']} vs {digests}")
    return (digests.pop() if len(digests) == 1 else None), summary or {}, metrics or {}


def ucx_kill(ringfence, train_mlp, world, work):
    flags = ["--device", "cuda", "--backend", "ucx"]
    ref, summ, met = job(ringfence, train_mlp, work, f"clean-w{world}", world, flags)
    check(summ.get("recoveries") == [] and met.get("recoveries") == 0, f"clean W={world}: recoveries reported")
    got, summ, met = job(ringfence, train_mlp, work, f"kill-w{world}", world, flags, ["--inject", KILL])
    fired = [(x.get("spec"), x.get("slot"), x.get("step")) for x in summ.get("injected", []) if x.get("by") == "worker"]
    check(fired == [(KILL, 1, 20)], f"kill W={world}: faults fired by workers {fired}, want {[(KILL, 1, 20)]}")
    recs = summ.get("recoveries", [])
    check(len(recs) == 1 and recs[0].get("finished") and recs[0].get("world") == world,
          f"kill W={world}: recoveries {recs}, want one, finished, world {world}")
    check(met.get("recoveries") == 1, f"kill W={world}: slot 0 reports {met.get('recoveries')} recoveries")
    check(ref is not None and got == ref, f"kill W={world}: final state {got} differs from the failure-free run's {ref}")
    ms = recs[0].get("total_ms") if len(recs) == 1 else None
    took = f" ({recs[0].get('cause')}, {ms:.0f} ms)" if isinstance(ms, (int, float)) else ""
    print(f"RESULT UCX fallback W={world} on the GPU, {KILL}: "
          f"{'DONE' if summ.get('phase') == 'DONE' else 'NOT DONE'}, {len(recs)} recovery{took}, "
          f"final digest {'equal to' if got == ref and ref else 'DIFFERENT from'} "
          f"the failure-free run's ({(ref or '?')[:8]}…)")


def nccl_w1(ringfence, train_mlp, work):
    ucx, _, _ = job(ringfence, train_mlp, work, "ucx-w1", 1, ["--device", "cuda", "--backend", "ucx"])
    nccl, _, _ = job(ringfence, train_mlp, work, "nccl-w1", 1, ["--device", "cuda", "--backend", "nccl"])
    check(ucx is not None and nccl == ucx, f"W=1: NCCL's final state {nccl} is not the UCX fallback's {ucx}")
    print(f"RESULT NCCL W=1 on the GPU: {'DONE' if nccl else 'FAILED'}; digest "
          f"{'equal to' if nccl == ucx and ucx else 'DIFFERENT from'} the UCX fallback's ({(ucx or '?')[:8]}…)")


def cuda_graph(program, work):
    model = os.path.basename(program).replace("train_", "")
    # 1000 samples in batches of 96: 10 full batches and a short one (40) per epoch
    common = [program, "--device", "cuda", "--synthetic", "1000", "--batch", "96", "--epochs", "4",
              "--max-steps", "40", "--log-interval", "0"]
    eager = train("eager", common, work, 60)
    graph = train("graph", common + ["--cuda-graph"], work, 60)
    os.makedirs(f"{work}/ck")
    first = train("graph-first-half", common[:-4] + ["--max-steps", "17", "--log-interval", "0", "--cuda-graph",
                                                      "--ckpt-dir", f"{work}/ck"], work, 60)
    resumed = train("graph-resumed", common + ["--cuda-graph", "--ckpt-dir", f"{work}/ck", "--resume"], work, 60)
    if None in (eager, graph, first, resumed):
        return
    with open(f"{work}/graph.txt") as f:
        m = GRAPH_LINE.search(f.read())
    check(m is not None and int(m.group(1)) >= 1 and int(m.group(2)) > 0,
          f"--cuda-graph: no '== cuda graph: ...' line with a capture and replays: {m.group(0) if m else None}")
    check(graph["state_digest"] == eager["state_digest"],
          f"--cuda-graph's final state {graph['state_digest']} is not the eager run's {eager['state_digest']}")
    check(resumed["resumed_step"] == 16 and resumed["state_digest"] == eager["state_digest"],
          f"--cuda-graph resumed at step {resumed['resumed_step']}: final state {resumed['state_digest']}, "
          f"the eager run's {eager['state_digest']}")
    print(f"RESULT {model} --cuda-graph, 40 steps by hand: {m.group(0)[3:] if m else 'no graph line'}; final digest "
          f"{'equal to' if graph['state_digest'] == eager['state_digest'] else 'DIFFERENT from'} the eager run's, "
          f"resumed after step 16 {'equal' if resumed['state_digest'] == eager['state_digest'] else 'DIFFERENT'} "
          f"({eager['state_digest'][:8]}…); unmeasured: {graph['samples_per_sec']:.0f} vs "
          f"{eager['samples_per_sec']:.0f} samples/s at batch 96 is no timing")


def main():
    usage = __doc__.split("\n\n")[1]
    if len(sys.argv) < 3:
        sys.exit(f"usage:\n{usage}")
    mode, args = sys.argv[1], sys.argv[2:]
    arity = {"accuracy": 2, "ucx-kill": 3, "nccl-w1": 2, "cuda-graph": 1}
    if arity.get(mode) != len(args):
        print(f"usage:\n{usage}", file=sys.stderr)
        return 2
    global T_END
    T_END = time.monotonic() + BUDGET_S[mode]
    # A runner's time limit (scripts/gpu-check's `timeout`) sends SIGTERM: exit through
    # rf_testlib.run, which kills the running command's process group on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    program = args[0] if mode in ("accuracy", "cuda-graph") else args[1]
    tmp = tempfile.mkdtemp(prefix=f"gpu_programs_{mode}_")
    try:
        why = no_gpu_reason(program, tmp)
        if why:
            print(f"SKIPPED: no GPU: {why}")
            return SKIP
        if mode == "accuracy":
            accuracy(args[0], args[1], tmp)
        elif mode == "cuda-graph":
            cuda_graph(args[0], tmp)
        elif mode == "ucx-kill":
            ucx_kill(args[0], args[1], int(args[2]), tmp)
        else:
            nccl_w1(args[0], args[1], tmp)
    finally:
        if failures:
            print(f"(work dir kept: {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
