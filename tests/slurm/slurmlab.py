"""slurmlab: a K-node Slurm cluster on one machine, for integration tests.

    with SlurmLab(3) as sl:                       # nodes n0..n2 = netlab hosts h0..h2
        r = sl.run(["srun", "-N3", "hostname"], timeout=30)
        job = sl.sbatch("#!/bin/sh\nsrun -N3 sleep 1\n")
        assert sl.wait_job(job, 60) == "COMPLETED"
        sl.kill_node(2); sl.wait_node_state(2, {"DOWN"}, 30)
        sl.restart_node(2); sl.wait_node_state(2, {"IDLE"}, 30)

The layout: a netlab.Lab gives K network namespaces on one bridge (host i has address
lab.addr(i)). One munged runs on this machine with its own key and socket in the lab's temp
dir (a unix socket is reached by path from every network namespace); slurmctld runs in host
0's namespace and one slurmd per host, each in its host's namespace with its own host name
(a UTS namespace), so a task's `hostname` is its node's name. Every client command
(srun, sbatch, scontrol, ...) runs inside a host's namespace, with SLURM_CONF pointing at
the lab's slurm.conf.

The /sys trap: `ip netns exec` (what netlab.Lab.spawn uses) remounts /sys for the namespace,
which hides this machine's cgroup v1 mounts; slurmd then refuses to start ("No filesystem
mounted on /sys/fs/cgroup"), and mounting cgroup2 there instead makes it refuse the hybrid
layout. `nsenter --net` enters only the network namespace and keeps /sys, so every process
here is started with nsenter, never with `ip netns exec`.

Accounting: Slurm 22.05 has no file-based accounting storage any more (the plugins shipped
are accounting_storage/none and /slurmdbd only), so `sacct` of steps needs slurmdbd and a
MySQL/MariaDB server. This lab runs without them: plain sacct answers "accounting storage
is disabled". What it has instead is jobcomp/filetxt (one line per finished job: id, state,
nodes, times, exit code), which `sacct -c` reads (jobs only, no steps), completions()
parses, and which gives wait_job() a job's final state after slurmctld has purged its
record (MinJobAge). A step's state can be read only while it runs (`scontrol show step`).
tests/slurm/FINDINGS.md says more.

Cleanup is total and runs however the test ends (close(), the context manager, atexit,
SIGTERM): clients, slurmd, slurmctld and munged are killed by PID and reaped, then netlab
kills whatever is left in the namespaces and deletes them, then the temp dir goes (kept with
keep=True). Each lab writes its daemons' pids to OWNERS/<owner pid>.json; a lab whose owner
died before cleanup (SIGKILL) is found there by the next one and removed.
"""
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "multihost"))
import netlab  # noqa: E402

# Where each live lab names its daemons, so that a lab left by a killed test can be removed.
OWNERS = "/run/rf-slurmlab"
CTLD_PORT = 16817
SLURMD_PORT = 16818
# The states a job ends in (scontrol's JobState); wait_job() returns one of them.
FINAL_JOB_STATES = {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT", "PREEMPTED", "BOOT_FAIL",
                    "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}
# The states of a usable node. A wanted state made of these only (plain IDLE) does not match
# a node that also carries a trouble flag (IDLE+NOT_RESPONDING, IDLE+DRAIN): see _matches.
HEALTHY_STATES = {"IDLE", "ALLOCATED", "MIXED", "COMPLETING"}
TROUBLE_FLAGS = {"NOT_RESPONDING", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "POWERED_DOWN", "POWERING_DOWN",
                 "POWERING_UP", "INVALID_REG", "REBOOT_REQUESTED", "MAINTENANCE", "RESERVED"}
SETUP_HINT = "scripts/setup installs slurm-wlm and munge"


def unavailable_reason():
    """None when this machine can run a SlurmLab, else why not (for a skip, exit 77)."""
    why = netlab.unavailable_reason()
    if why:
        return why
    for tool in ("slurmctld", "slurmd", "srun", "sbatch", "scontrol", "sinfo", "munged", "nsenter", "unshare"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"'{tool}' is not installed ({SETUP_HINT})"
    if not os.path.isdir("/sys/fs/cgroup") or not os.listdir("/sys/fs/cgroup"):
        return "no cgroup filesystem on /sys/fs/cgroup (slurmd refuses to start without one)"
    return None


def _tool(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_time(pid):
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), which
    tells a recorded pid from a later process that reuses the number; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _become_subreaper():
    """Makes this process the child subreaper of what it starts: slurmd forks each step's
    slurmstepd as a daemon (double fork), so without this the slurmstepd and its tasks are
    orphans of pid 1, whose zombies linger after they are killed; with it they become our
    children, and close() and kill_node() reap them by pid."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass  # only zombies linger a while longer; pid 1 reaps them eventually


def _reap(pids, deadline_s=5):
    """Reaps those of `pids` (already SIGKILLed) that are our children (subreaper, above);
    a pid that is not ours, or not yet dead at the deadline, is left alone."""
    mine = os.getpid()
    end = time.monotonic() + deadline_s
    for pid in pids:
        while _ppid(pid) == mine:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
            except ChildProcessError:
                break
            if time.monotonic() > end:
                break
            time.sleep(0.01)


# The daemons' process names (/proc/PID/comm): a zombie child of ours named so is one of
# them, reparented to us (a slurmstepd whose step ended, a slurmscriptd whose slurmctld
# was killed), never a process the test itself started.
DAEMON_COMMS = {"slurmstepd", "slurmscriptd", "slurmd", "slurmctld", "munged"}


def _reap_daemon_zombies():
    mine = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat.rsplit(")", 1)[1].split()
        if rest[0] == "Z" and int(rest[1]) == mine and comm in DAEMON_COMMS:
            try:
                os.waitpid(int(pid), os.WNOHANG)
            except ChildProcessError:
                pass


def _kill_reap(pid, popen=None):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if popen is not None:
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def sweep_stale():
    """Removes what labs of dead owners left: their daemons (by recorded pid and start time,
    so a reused pid is never hit) and temp dirs. Their namespaces go by netlab.sweep_stale()."""
    try:
        names = os.listdir(OWNERS)
    except FileNotFoundError:
        return
    for name in names:
        owner = name.split(".")[0]
        if not owner.isdigit() or _pid_alive(int(owner)):
            continue
        path = os.path.join(OWNERS, name)
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            rec = {}
        for pid, start in rec.get("pids", []):
            if _start_time(pid) == start:
                _kill_reap(pid)
                _reap([pid])
        # Its steps and tasks, in its namespaces (reaped where they are orphans of ours).
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        for ns in (line.split()[0] for line in r.stdout.splitlines() if line.split()):
            if ns.startswith(f"{netlab.PREFIX}{owner}-"):
                _reap(netlab._kill_netns_pids(ns))
        _reap_daemon_zombies()
        tmp = rec.get("tmp", "")
        if tmp.startswith(tempfile.gettempdir()) and os.path.basename(tmp).startswith("rf-slurmlab-"):
            shutil.rmtree(tmp, ignore_errors=True)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    netlab.sweep_stale()


def _parse_kv(line):
    """scontrol's one-line `Key=Value Key=Value` output as a dict. A value may hold spaces
    (Command=..., Reason=...): a word without '=' belongs to the value before it."""
    out = {}
    key = None
    for word in line.split():
        m = re.match(r"^([A-Za-z][A-Za-z0-9_:/.]*)=(.*)$", word)
        if m:
            key = m.group(1)
            out[key] = m.group(2)
        elif key is not None:
            out[key] += " " + word
    return out


class SlurmLab:
    def __init__(self, hosts=3, keep=False, cpus_per_node=4, slurmd_timeout=3, message_timeout=3, min_job_age=30,
                 extra_conf=""):
        self.n = hosts
        self.keep = keep
        self.closed = False
        self.clients = []  # Popen of spawn(), killed by process group at close
        self.slurmd = [None] * hosts  # Popen per node
        self.ctld = None
        self.munged = None
        self._recorded = []  # (pid, start time) of every daemon, in OWNERS/<pid>.json
        self.lab = None
        sweep_stale()
        self.tmp = tempfile.mkdtemp(prefix="rf-slurmlab-")
        os.makedirs(OWNERS, exist_ok=True)
        self._owner_file = os.path.join(OWNERS, f"{os.getpid()}.json")
        self.names = [f"n{i}" for i in range(hosts)]
        self.conf = os.path.join(self.tmp, "slurm.conf")
        self.munge_socket = os.path.join(self.tmp, "munge.socket")
        self.jobcomp = os.path.join(self.tmp, "jobcomp.txt")
        self._old_term = signal.getsignal(signal.SIGTERM)
        _become_subreaper()
        try:
            self._record()
            self.lab = netlab.Lab(hosts)  # registers its own atexit and SIGTERM cleanup first...
            atexit.register(self.close)  # ...so this one runs before it (atexit is last-in first-out)
            self._old_term = signal.signal(signal.SIGTERM, self._on_term)
            self._write_conf(cpus_per_node, slurmd_timeout, message_timeout, min_job_age, extra_conf)
            self._start_munged()
            self._start_ctld()
            for i in range(hosts):
                self._start_slurmd(i)
            self.wait_all_idle(60)
        except BaseException:
            self.close()
            raise

    # ---- configuration and daemons ----
    def _write_conf(self, cpus, slurmd_timeout, message_timeout, min_job_age, extra):
        t = self.tmp
        for d in ("state", "log"):
            os.makedirs(os.path.join(t, d), exist_ok=True)
        for name in self.names:
            os.makedirs(os.path.join(t, f"spool-{name}"), exist_ok=True)
        nodes = "\n".join(f"NodeName={name} NodeAddr={self.lab.addr(i)} NodeHostname={name} CPUs={cpus} "
                          f"RealMemory=1000 State=UNKNOWN" for i, name in enumerate(self.names))
        conf = f"""# Written by tests/slurm/slurmlab.py for one test; see there for why each line is so.
ClusterName=rflab
SlurmctldHost=n0({self.lab.addr(0)})
SlurmctldPort={CTLD_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
# This lab's own munged (a unix socket, reached by path from every namespace).
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool-%n
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/slurmd-%n.pid
SlurmctldLogFile={t}/log/slurmctld.log
SlurmdLogFile={t}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: the hosts share this machine's, and proctrack/linuxproc finds a step's
# processes by parent pid, which is all a test needs.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
LaunchType=launch/slurm
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# The nodes claim CPUs and memory this machine does not have: take slurm.conf's word for
# them, else slurmd registers its real 2 cores and the node is drained ("Low CPUs").
SlurmdParameters=config_overrides
# A lost node is noticed within seconds (slurmctld pings every SlurmdTimeout/3), and a
# node that comes back (its slurmd registers again) returns to service by itself.
SlurmdTimeout={slurmd_timeout}
SlurmctldTimeout=10
MessageTimeout={message_timeout}
TCPTimeout=2
ReturnToService=2
# A finished job's record stays in slurmctld this long (scontrol show job); its final
# state is also in the jobcomp file after that.
MinJobAge={min_job_age}
KillOnBadExit=0
MailProg=/bin/true
KillWait=5
InactiveLimit=0
Waittime=0
# No slurmdbd here (sacct of steps needs it: Slurm 22.05 has no file-based accounting
# storage any more); a finished job's record goes to a text file, which `sacct -c` reads.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
{extra}
{nodes}
PartitionName=lab Nodes={",".join(self.names)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
        with open(self.conf, "w") as f:
            f.write(conf)

    def _record(self):
        """Rewrites OWNERS/<our pid>.json with the daemons started so far."""
        tmpf = self._owner_file + ".new"
        with open(tmpf, "w") as f:
            json.dump({"tmp": self.tmp, "pids": self._recorded}, f)
        os.replace(tmpf, self._owner_file)

    def _track(self, p):
        self._recorded.append((p.pid, _start_time(p.pid)))
        self._record()

    def _daemon(self, argv, log, host=None, hostname=None):
        """Starts a daemon in the foreground (so its pid is the Popen's), in its own session,
        inside host `host`'s network namespace (None: this machine's) and, with hostname,
        its own UTS namespace bearing that host name."""
        if hostname is not None:
            # exec: the pid stays the daemon's, so kill_node() and close() hit it directly.
            argv = ["unshare", "--uts", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh", *argv]
        if host is not None:
            argv = ["nsenter", f"--net=/run/netns/{self.lab.ns(host)}", *argv]
        out = open(log, "a")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=self._env())
        out.close()
        self._track(p)
        return p

    def _start_munged(self):
        key = os.path.join(self.tmp, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        # --force: as root, munged would refuse a key or socket under /tmp (world-writable,
        # sticky); the temp dir itself is 0700.
        self.munged = self._daemon([_tool("munged"), "--foreground", "--force", f"--socket={self.munge_socket}",
                                    f"--key-file={key}", f"--pid-file={self.tmp}/munged.pid",
                                    f"--log-file={self.tmp}/log/munged.log", f"--seed-file={self.tmp}/munged.seed"],
                                   os.path.join(self.tmp, "log", "munged.out"))
        self._wait(lambda: os.path.exists(self.munge_socket), 10, "munged's socket",
                   lambda: self.munged.poll() is None)

    def _start_ctld(self):
        # -c: no state from an earlier run (there is none: a fresh StateSaveLocation), -i:
        # ignore state-file errors; -D: foreground.
        self.ctld = self._daemon([_tool("slurmctld"), "-D", "-c", "-i", "-f", self.conf],
                                 os.path.join(self.tmp, "log", "slurmctld.out"), host=0, hostname="n0")
        self._wait(lambda: self.run(["scontrol", "ping"], timeout=10).stdout.find("UP") >= 0, 30,
                   "slurmctld answering", lambda: self.ctld.poll() is None)

    def _start_slurmd(self, i):
        name = self.names[i]
        self.slurmd[i] = self._daemon([_tool("slurmd"), "-D", "-N", name, "-f", self.conf],
                                      os.path.join(self.tmp, "log", f"slurmd-{name}.out"), host=i, hostname=name)

    def _wait(self, cond, deadline_s, what, alive=lambda: True):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if cond():
                return
            if not alive():
                raise RuntimeError(f"slurmlab: {what}: the daemon exited; logs in {self.tmp}/log")
            time.sleep(0.1)  # a poll interval: the condition decides
        raise RuntimeError(f"slurmlab: {what}: not within {deadline_s} s; logs in {self.tmp}/log")

    def wait_all_idle(self, deadline_s):
        self._wait(lambda: all(self._matches(s, {"IDLE"}) for s in self.node_states()), deadline_s,
                   "every node IDLE")

    # ---- clients ----
    def _env(self, extra=None):
        # Inherited SLURM_* (a test run inside some Slurm job) would steer srun to that job.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = self.conf
        env.update(extra or {})
        return env

    def _client_argv(self, argv, host):
        return ["nsenter", f"--net=/run/netns/{self.lab.ns(host)}", *argv]

    def run(self, argv, timeout, host=0, env=None, input=None, cwd=None):
        """Runs a client command (srun, sbatch, scontrol, ...) inside host `host` to
        completion; CompletedProcess with text stdout/stderr. On timeout its whole session
        is SIGKILLed and subprocess.TimeoutExpired raised. cwd (default: the lab's temp dir)
        is also where srun's tasks start."""
        p = subprocess.Popen(self._client_argv(argv, host), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL, text=True,
                             start_new_session=True, env=self._env(env), cwd=cwd or self.tmp)
        try:
            out, err = p.communicate(input=input, timeout=timeout)
        except BaseException:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.communicate()
            raise
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def spawn(self, argv, log, host=0, env=None, cwd=None):
        """Starts a client command inside host `host` in the background, in its own session,
        output to `log`; the Popen is returned, and killed (its process group) and reaped at
        close."""
        out = open(log, "w")
        p = subprocess.Popen(self._client_argv(argv, host), stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True, env=self._env(env),
                             cwd=cwd or self.tmp)
        out.close()
        self.clients.append(p)
        return p

    def scontrol(self, *args, timeout=15):
        return self.run(["scontrol", *args], timeout=timeout)

    # ---- jobs ----
    def sbatch(self, script, args=(), env=None):
        """Submits a batch script (a path, or the script's text) -> job id (int). The job
        runs in the lab's temp dir and writes its output to job_output(id) unless args say
        otherwise (--chdir, --output: later options win). env: added to sbatch's environment,
        which the job inherits (sbatch's --export=ALL)."""
        if not os.path.exists(script):
            path = tempfile.NamedTemporaryFile("w", dir=self.tmp, prefix="job-", suffix=".sh", delete=False)
            path.write(script)
            path.close()
            script = path.name
        r = self.run(["sbatch", "--parsable", f"--chdir={self.tmp}", f"--output={self.tmp}/slurm-%j.out", *args,
                      script], timeout=30, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed ({r.returncode}): {r.stderr.strip()}")
        return int(r.stdout.strip().split(";")[0])

    def job_output(self, jobid):
        """The text of a batch job's default output file (sbatch's --output here)."""
        try:
            with open(os.path.join(self.tmp, f"slurm-{jobid}.out")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def job_info(self, jobid):
        """`scontrol show job -o` as a dict; None when slurmctld does not know the job (never
        submitted, or purged MinJobAge after it ended)."""
        r = self.scontrol("show", "job", "-o", str(jobid))
        if r.returncode != 0 or not r.stdout.strip():
            return None
        return _parse_kv(r.stdout.strip().splitlines()[0])

    def completions(self):
        """The jobcomp/filetxt records: one dict per finished job (JobId, JobState, NodeList,
        StartTime, EndTime, ExitCode, ...)."""
        try:
            with open(self.jobcomp) as f:
                return [_parse_kv(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def job_state(self, jobid):
        info = self.job_info(jobid)
        if info is not None:
            return info.get("JobState")
        for rec in self.completions():
            if rec.get("JobId") == str(jobid):
                return rec.get("JobState")
        return None

    def wait_job(self, jobid, deadline_s):
        """Waits for the job to end; its final state (COMPLETED, FAILED, CANCELLED, NODE_FAIL,
        TIMEOUT, ...), or None when it had not ended within deadline_s."""
        end = time.monotonic() + deadline_s
        while True:
            state = self.job_state(jobid)
            if state in FINAL_JOB_STATES:
                return state
            if time.monotonic() >= end:
                return None
            time.sleep(0.2)  # a poll interval: the state decides

    # ---- nodes ----
    def node_info(self, i):
        r = self.scontrol("show", "node", "-o", self.names[i])
        if r.returncode != 0 or not r.stdout.strip():
            return None
        return _parse_kv(r.stdout.strip().splitlines()[0])

    def node_state(self, i):
        """The node's state as scontrol says it (IDLE, ALLOCATED, MIXED, DOWN+NOT_RESPONDING,
        IDLE+DRAIN, ...), or None when slurmctld does not answer."""
        info = self.node_info(i)
        return None if info is None else info.get("State")

    def node_states(self):
        r = self.scontrol("show", "node", "-o")
        states = {}
        for line in r.stdout.splitlines():
            kv = _parse_kv(line)
            if "NodeName" in kv:
                states[kv["NodeName"]] = kv.get("State")
        return [states.get(name) for name in self.names]

    @staticmethod
    def _matches(state, wanted):
        """Whether a node state matches one of `wanted`: every '+' part of the wanted state is
        among the node's (a trailing '*', sinfo's NOT_RESPONDING, counts as that flag), and a
        wanted state made of healthy states only (plain IDLE) does not match a node with a
        trouble flag (IDLE+NOT_RESPONDING). So {"DOWN"} matches DOWN+NOT_RESPONDING, and
        {"IDLE"} matches only a node that is really usable."""
        if not state:
            return False
        parts = set(state.rstrip("*").split("+"))
        if state.endswith("*"):
            parts.add("NOT_RESPONDING")
        for w in wanted:
            want = set(w.split("+"))
            if want <= parts and (not want <= HEALTHY_STATES or not (parts & TROUBLE_FLAGS)):
                return True
        return False

    def wait_node_state(self, i, states, deadline_s):
        """Waits until node i's state matches one of `states` (see _matches); the state seen
        then, or None when not within deadline_s."""
        if isinstance(states, str):
            states = {states}
        end = time.monotonic() + deadline_s
        while True:
            s = self.node_state(i)
            if self._matches(s, states):
                return s
            if time.monotonic() >= end:
                return None
            time.sleep(0.1)

    def _exempt(self):
        """Processes that stand for the controller and the login machine, not for a node:
        slurmctld (and its slurmscriptd) and the harness's own clients, with their children."""
        roots = {p.pid for p in self.clients if p.poll() is None}
        if self.ctld is not None and self.ctld.poll() is None:
            roots.add(self.ctld.pid)
        return roots

    def node_pids(self, i):
        """Every process on host i: everything in its network namespace except slurmctld and
        the harness's clients (see _exempt) and their descendants."""
        roots = self._exempt()
        r = subprocess.run(["ip", "netns", "pids", self.lab.ns(i)], capture_output=True, text=True)
        out = []
        for pid in (int(p) for p in r.stdout.split() if p.isdigit()):
            a, hops = pid, 0
            while a and a > 1 and a not in roots and hops < 64:
                a, hops = _ppid(a), hops + 1
            if a not in roots:
                out.append(pid)
        return out

    def kill_node(self, i):
        """Node i is lost: its slurmd and every process on its host (node_pids: the steps'
        slurmstepd and tasks, which are not slurmd's children) SIGKILLed at once. slurmctld
        learns it only by its pings failing (node_state NOT_RESPONDING, then DOWN after
        SlurmdTimeout)."""
        p = self.slurmd[i]
        end = time.monotonic() + 10
        while True:
            pids = self.node_pids(i)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            # The slurmd is reaped by its Popen (a waitpid here would leave the Popen a pid
            # that may be reused); the rest, orphans of ours, here.
            _reap([pid for pid in pids if p is None or pid != p.pid])
            _reap_daemon_zombies()
            if p is not None:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            # A process forked while we killed (a step starting) is caught by the next round.
            if not self.node_pids(i) or time.monotonic() > end:
                break

    def restart_node(self, i):
        """Starts node i's slurmd again: it registers and, with ReturnToService=2, the node
        returns to service (wait for it with wait_node_state(i, {"IDLE"}, ...))."""
        p = self.slurmd[i]
        if p is not None and p.poll() is None:
            raise RuntimeError(f"restart_node({i}): its slurmd is still running")
        self._start_slurmd(i)

    def cut_link(self, i):
        """Host i's cable is pulled (both directions); its processes keep running."""
        self.lab.link_down(i)

    def heal_link(self, i):
        self.lab.link_up(i)

    def log(self, name):
        """A daemon's log (slurmctld, slurmd-n1, munged) as text."""
        try:
            with open(os.path.join(self.tmp, "log", f"{name}.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    # ---- cleanup ----
    def _on_term(self, signum, frame):
        if os.environ.get("SLURMLAB_DEBUG"):
            print(f"slurmlab: signal {signum}: closing", file=sys.stderr, flush=True)
        self.close()
        sys.exit(128 + signum)

    def close(self):
        if self.closed:
            return
        self.closed = True
        # Clients first (an srun would otherwise see its step die and report it), then the
        # nodes, the controller and munged, each killed by pid and reaped.
        for p in self.clients:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.clients:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for p in [*self.slurmd, self.ctld, self.munged]:
            if p is not None and p.poll() is None:
                _kill_reap(p.pid, p)
        # Every process still in a namespace (slurmstepd, tasks) killed and, being orphans
        # of ours (subreaper), reaped; then netlab deletes the namespaces (and kills again).
        if self.lab is not None:
            left = []
            for ns in self.lab.names:
                left += netlab._kill_netns_pids(ns)
            _reap(left)
            self.lab.close()
        _reap_daemon_zombies()
        try:
            signal.signal(signal.SIGTERM, self._old_term)
        except (ValueError, TypeError, AttributeError):
            pass
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            os.unlink(self._owner_file)
        except FileNotFoundError:
            pass

    def leftovers(self):
        """What of this lab still exists after close (all empty when cleanup was total):
        namespaces, live daemon pids, the temp dir."""
        return {"netns": self.lab.leftovers() if self.lab is not None else [],
                "pids": [pid for pid, start in self._recorded if _start_time(pid) == start],
                "tmp": [self.tmp] if os.path.exists(self.tmp) and not self.keep else []}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
