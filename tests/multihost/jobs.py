"""One ringfence job across the test hosts of a netlab.Lab: `ringfence coord` on host 0 and
one `ringfence run --nnodes K` launcher per host, with a callback that injects faults while
it runs; then what the launchers and workers said, parsed.

UCX recognises "the same machine" by the kernel's boot id, which the test hosts share, so it
would carry their bytes through shared memory; the launchers run with UCX_TLS=self,tcp, as
separate machines talk. ringfence's own shared-memory paths key on the host identity
(comm/host_identity.h) and stay within a host by themselves.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "ddp"))
import netlab  # noqa: E402
from auditlog import exactly_once_problems  # noqa: E402
from rf_testlib import check, failures  # noqa: E402

PORT = 29411


def wait_for(cond, what, deadline_s):
    """Polls cond until it holds; False (and a failed check) when deadline_s passes first."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)  # a poll interval; the condition decides
    check(False, f"{what} within {deadline_s} s")
    return False


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


class Job:
    """Everything one run left: exit codes, logs, final states, audit records."""

    def __init__(self, name, tmp):
        self.name, self.tmp = name, tmp
        self.codes, self.logs, self.coord_log = [], [], ""
        self.digests = {}      # slot -> final state digest
        self.final_loss = None
        self.audit = os.path.join(tmp, f"{name}-audit.jsonl")
        self.link_bytes = []   # per host: (rx, tx) of eth0 at the end

    def text(self, host):
        return read(self.logs[host])

    def audits(self):
        """{"slotS-incI": records} from the shared audit log (one file, a line per write)."""
        out = {}
        text = read(self.audit)
        for line in text[:text.rfind("\n") + 1].splitlines():
            if line.strip():
                r = json.loads(line)
                out.setdefault(f"slot{r['slot']}-inc{r['inc']}", []).append(r)
        return out

    def exactly_once_problems(self):
        return exactly_once_problems(self.audits())

    def applied_steps(self):
        """Every step some worker applied."""
        return sorted({r["s"] for rs in self.audits().values() for r in rs if r["event"] == "apply"})

    def dump(self):
        print(f"---- job {self.name}: codes {self.codes}, digests {self.digests}")
        for path in [self.coord_log] + self.logs + getattr(self, "logs_extra", []):
            lines = [ln for ln in read(path).splitlines() if "UCX  WARN" not in ln]
            print(f"---- {path} (last 20 lines)\n" + "\n".join(lines[-20:]))


def run_job(bindir, tmp, name, hosts=3, per_host=2, steps=200, launcher_args=None, coord_args=(), worker_args=(),
            during=None, deadline_s=120, lab=None, control=None):
    """Runs one job; returns its Job. launcher_args: {host: [extra ringfence run flags]}.
    during(lab, job, procs) runs once every launcher has started (faults, heals); it may
    replace procs[i] (a host that returns). Uses `lab` when given (hosts beyond the job's
    stay idle), else a fresh netlab.Lab(hosts). control: coordinator replicas in etcd
    (control.Replicas) instead of one `ringfence coord` on host 0."""
    job = Job(name, tmp)
    job.bindir = bindir
    own = lab is None
    lab = lab or netlab.Lab(hosts)
    try:
        token = os.path.join(tmp, f"{name}.token")
        job.coord_log = os.path.join(tmp, f"{name}-coord.log")
        world = hosts * per_host
        if control:
            coord_flags = control.start(lab, job, world, token, tmp)
            if not wait_for(lambda: control.leader() is not None, f"{name}: a coordinator replica leads", 30):
                return job
        else:
            coord_flags = ["--coord", f"{lab.addr(0)}:{PORT}", "--token-file", token]
            lab.spawn(0, [f"{bindir}/ringfence", "coord", "-n", str(world), "--host", lab.addr(0), "--port", str(PORT),
                          "--token-file", token, "--event-log", os.path.join(tmp, f"{name}-events.jsonl"),
                          *coord_args], job.coord_log)
            if not wait_for(lambda: "listening" in read(job.coord_log), f"{name}: coordinator listening", 20):
                return job
        job.env = dict(os.environ, UCX_TLS="self,tcp")
        job.launch = lambda i, log: lab.spawn(i, launcher_argv(i), log, env=job.env)

        def launcher_argv(i):
            return [f"{bindir}/ringfence", "run", "-n", str(per_host), *coord_flags, "--nnodes", str(hosts),
                    "--node-rank", str(i), *(launcher_args or {}).get(i, []), "--",
                    f"{bindir}/train_mlp", "--epochs", "10", "--max-steps", str(steps), "--log-interval", "20",
                    "--audit-log", job.audit, "--metrics", os.path.join(tmp, f"{name}-metrics.json"), *worker_args]
        procs = []
        for i in range(hosts):
            job.logs.append(os.path.join(tmp, f"{name}-h{i}.log"))
            procs.append(job.launch(i, job.logs[-1]))
        if during:
            during(lab, job, procs)
        end = time.monotonic() + deadline_s
        for p in procs:
            try:
                job.codes.append(p.wait(timeout=max(0.1, end - time.monotonic())))
            except subprocess.TimeoutExpired:
                job.codes.append(None)
        for i in range(hosts):
            out = lab.run(i, ["cat", "/sys/class/net/eth0/statistics/rx_bytes",
                              "/sys/class/net/eth0/statistics/tx_bytes"], 10).stdout.split()
            job.link_bytes.append((int(out[0]), int(out[1])) if len(out) == 2 else (0, 0))
    finally:
        if own:
            lab.close()
    for path in job.logs:
        for slot, digest in re.findall(r"== train_mlp slot (\d+) incarnation \d+: step \d+, .*state (x3:[0-9a-f]{32})",
                                       read(path)):
            job.digests[int(slot)] = digest
    metrics = read(os.path.join(tmp, f"{name}-metrics.json"))
    if metrics:
        job.final_loss = json.loads(metrics).get("final_loss")
    return job


def check_done(job, what, steps, world=None):
    """Every launcher exited 0 saying DONE (at W = world when given), and steps 0..steps-1
    were each applied exactly once with one digest per step."""
    check(job.codes and all(c == 0 for c in job.codes if c is not None) and None not in job.codes,
          f"{what}: launchers exit 0 (got {job.codes})")
    check(all("job DONE" in job.text(i) for i in range(len(job.logs))), f"{what}: every launcher says job DONE")
    if world is not None:
        ends = re.findall(r"g \d+ DONE \| members (\d+)/", job.text(0))
        check(ends and int(ends[-1]) == world, f"{what}: the job ends at W = {world} (got {ends[-1:] or 'none'})")
    problems = job.exactly_once_problems()
    check(not problems, f"{what}: every step applied exactly once, one digest per step: {problems[:3]}")
    check(job.applied_steps() == list(range(steps)), f"{what}: steps 0..{steps - 1} applied")


def events(job):
    """The coordinator's event log so far (whole lines only: it may be writing the next);
    with etcd replicas (control.Replicas), every replica's, one after the other."""
    if getattr(job, "replicas", None):
        return [e for k in range(len(job.replicas.events)) for e in job.replicas.event_lines(k)]
    out = []
    text = read(os.path.join(job.tmp, f"{job.name}-events.jsonl"))
    for line in text[:text.rfind("\n") + 1].splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def check_cost(job, what, restarts, faulty=()):
    """The faults cost what they should (docs/launcher.md): `restarts` worker restarts over
    the launchers that ended (an int, or a (least, most) pair where the fault may cost one
    or none), no slot outside `faulty` failed or evicted (the coordinator's event log), never
    a whole-job restart or a start from step 0."""
    texts = [job.text(i) for i in range(len(job.logs))]
    got = sum(int(m) for t in texts for m in re.findall(r"job DONE \(exit 0\): generation \d+, (\d+) restart", t))
    least, most = restarts if isinstance(restarts, tuple) else (restarts, restarts)
    check(least <= got <= most, f"{what}: {got} restart(s) over the launchers, expected "
          f"{least if least == most else f'{least} to {most}'}")
    gone = sorted({e["worker"]["slot"] for e in events(job) if e["event"] in ("fail", "evict") and e.get("worker")})
    check(set(gone) <= set(faulty), f"{what}: slots failed or evicted {gone}, only {sorted(faulty)} were faulty")
    check(not any("whole-job restart" in e.get("detail", "") for e in events(job) if e["event"] == "plan"),
          f"{what}: a whole-job restart")
    check(not any("started again at step 0" in t for t in texts), f"{what}: the job started again at step 0")


def same_digest(job, ref, what, world=6):
    """Every slot of `job` ends with the single final digest of the failure-free `ref`."""
    want = set(ref.digests.values())
    check(len(want) == 1 and len(job.digests) == world and set(job.digests.values()) == want,
          f"{what}: every slot ends bitwise equal to the failure-free run {want} (got {job.digests})")


def step_applied(job, at_least):
    """Whether some worker's audit record says it applied a step >= at_least: exact to the
    step, where the launchers' live lines come about once a second (50 steps apart here)."""
    return any(r["event"] == "apply" and r["s"] >= at_least for rs in job.audits().values() for r in rs)


def step_seen(job, host, at_least):
    """Whether host's launcher printed a live line at step >= at_least."""
    return any(int(s) >= at_least for s in re.findall(r"\| step (\d+) \|", job.text(host)))


def case_main(prog, cases, run, needs=()):
    """The command line of a multi-host case test: `prog BUILD_BIN_DIR CASE`. Exit 77 (skipped)
    with the reason when namespaces cannot be made or a program in `needs` is missing; else
    run(bindir, case, tmp) -> the jobs it ran, dumped when a check failed. 0 passed, 1 failed."""
    if len(sys.argv) != 3 or sys.argv[2] not in cases:
        sys.exit(f"usage: {prog} BUILD_BIN_DIR {{{','.join(cases)}}}")
    why = netlab.unavailable_reason()
    if why:
        print(f"SKIPPED: no network namespaces: {why}")
        return 77
    for name, package in needs:
        if subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True).returncode != 0:
            print(f"SKIPPED: no {name} on PATH (Debian's {package}; scripts/setup installs it)")
            return 77
    bindir, case = os.path.abspath(sys.argv[1]), sys.argv[2]
    tmp = tempfile.mkdtemp(prefix=f"rf-{prog.split('.')[0]}-{case}-")
    t0 = time.monotonic()
    ran = run(bindir, case, tmp)
    if failures:
        for job in ran:
            job.dump()
        print(f"{prog} {case}: {len(failures)} check(s) failed in {time.monotonic() - t0:.1f} s; files in {tmp}")
        return 1
    subprocess.run(["rm", "-rf", tmp])
    print(f"{prog} {case}: passed in {time.monotonic() - t0:.1f} s")
    return 0

