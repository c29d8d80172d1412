"""A real Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, one slurmd per node) in one temp dir.

Set up as Slurm's Quick Start Administrator Guide (https://slurm.schedmd.com/quickstart_admin.html)
and slurmdbd.conf man page describe, Debian 12's packages: every daemon runs in the foreground as a
child of the test process, so teardown stops exactly these PIDs; nothing under /etc is read or written, and
every port is a free loopback port chosen at start. A daemon that does not come up within its
bounded wait raises ClusterError carrying the tail of its log, so the test fails with the cause.

Several nodes run on this one machine as Slurm's multiple-slurmd mode has them: each ``NodeName`` with
its own ``Port``, each slurmd started as ``slurmd -N NAME``, spool, pid and log files named per node
(``%n``). ``dead_nodes`` are listed in slurm.conf but get no slurmd: nodes that never answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.processes import free_port, log_tail, stop_children

NODE = "gpu-node-01"
READY_TIMEOUT_S = 30.0


class ClusterError(RuntimeError):
    """A daemon failed to start or a Slurm command failed; the message carries the log tail."""


@dataclass
class SlurmCluster:
    """One cluster under ``root`` (which must not exist yet); ``env`` carries SLURM_CONF for clients."""

    root: Path
    node: str = NODE
    extra_nodes: tuple[str, ...] = ()
    dead_nodes: tuple[str, ...] = ()
    extra_conf: str = ""
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = [self.node, *self.extra_nodes]
        self.multi = len(self.nodes) + len(self.dead_nodes) > 1
        self.etc, self.log, self.run_dir = self.root / "etc", self.root / "log", self.root / "run"
        self.out = self.root / "out"
        self.conf = self.etc / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf), LC_ALL="C", TZ="UTC")

    # ----------------------------------------------------------------- start and stop
    def start(self) -> SlurmCluster:
        self.root.mkdir(parents=True)
        for sub in ("etc", "log", "run", "spool/ctld", "spool/d", "db", "out"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged wants every directory above its socket searchable by all, which pytest's 0700
        # temp dirs are not: the socket and key get their own 0755 dir directly under /tmp
        self.munge_dir = Path(tempfile.mkdtemp(prefix="gpuwb-munge-", dir="/tmp"))
        self.munge_dir.chmod(0o755)
        try:
            self._start_munge()
            self._write_slurm_conf()
            self._start_mariadb()
            self._start_slurmdbd()
            self._spawn("slurmctld", ["slurmctld", "-D"])
            for node in self.nodes:
                self._spawn(self._slurmd_name(node), ["slurmd", "-D", "-N", node])
            for node in self.nodes:
                self._wait(self._slurmd_name(node), lambda n=node: self.cmd(["sinfo", "-h", "-n", n, "-o", "%T"],
                                                                           check=False).stdout.strip() == "idle",
                           self._slurmd_log(node), also=self.log / "slurmctld.log")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Cancel jobs first (slurmstepd outlives slurmd otherwise), then stop daemons newest first."""
        names = {name for name, _ in self.procs}
        if "slurmctld" in names and self._slurmd_name(self.node) in names:
            self.cmd(["scancel", "--full", "--user=root"], check=False, timeout=10)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and self.cmd(["squeue", "-h"], check=False).stdout.strip():
                time.sleep(0.2)
        stop_children(self.procs, grace=15)
        if getattr(self, "munge_dir", None) is not None:
            shutil.rmtree(self.munge_dir, ignore_errors=True)

    def _slurmd_name(self, node: str) -> str:
        return f"slurmd-{node}" if self.multi else "slurmd"

    def _slurmd_log(self, node: str) -> Path:
        return self.log / (f"slurmd-{node}.log" if self.multi else "slurmd.log")

    def stop_node(self, node: str) -> None:
        """Take a node off the air: its slurmd is stopped, the controller still counts on it."""
        name = self._slurmd_name(node)
        stop_children([p for p in self.procs if p[0] == name], grace=15)
        self.procs = [p for p in self.procs if p[0] != name]

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        out = open(self.log / f"{name}.out", "wb")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                cwd=self.root)
        out.close()
        self.procs.append((name, proc))
        return proc

    def _wait(self, name: str, ready: Callable[[], bool], log: Path, also: Path | None = None,
              timeout: float = READY_TIMEOUT_S) -> None:
        proc = dict(self.procs)[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        detail = f"--- {log}\n{log_tail(log)}\n--- {self.log / (name + '.out')}\n{log_tail(self.log / (name + '.out'))}"
        if also is not None:
            detail += f"\n--- {also}\n{log_tail(also)}"
        state = f"exited {proc.returncode}" if proc.poll() is not None else f"not ready after {timeout:.0f} s"
        raise ClusterError(f"{name} {state}\n{detail}")

    def _start_munge(self) -> None:
        key = self.munge_dir / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}", "--bits=1024"], check=True,
                       capture_output=True, timeout=30)
        self.munge_socket = self.munge_dir / "munge.socket"
        self._spawn("munged", ["munged", "-F", "--num-threads=10", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--log-file={self.log / 'munged.log'}",
                               f"--pid-file={self.run_dir / 'munged.pid'}",
                               f"--seed-file={self.munge_dir / 'munged.seed'}"])
        self._wait("munged", self.munge_socket.is_socket, self.log / "munged.log")

    def _start_mariadb(self) -> None:
        self.db_port = free_port()
        install = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.root / 'db'}", "--user=root",
                                  "--auth-root-authentication-method=normal", "--skip-test-db"],
                                 capture_output=True, text=True, timeout=120)
        if install.returncode != 0:
            raise ClusterError(f"mariadb-install-db failed ({install.returncode})\n{install.stdout[-2000:]}"
                               f"{install.stderr[-2000:]}")
        sock = self.run_dir / "mysqld.sock"
        self._spawn("mariadb", ["mariadbd", "--no-defaults", "--user=root", f"--datadir={self.root / 'db'}",
                                f"--socket={sock}", f"--pid-file={self.run_dir / 'mariadb.pid'}",
                                "--bind-address=127.0.0.1", f"--port={self.db_port}", "--skip-name-resolve",
                                "--skip-log-bin", "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=16M",
                                f"--log-error={self.log / 'mariadb.log'}"])
        client = ["--no-defaults", "-S", str(sock), "-uroot"]
        self._wait("mariadb", lambda: subprocess.run(["mariadb-admin", *client, "ping"], capture_output=True,
                                                     timeout=10).returncode == 0, self.log / "mariadb.log")
        subprocess.run(["mariadb", *client, "-e", "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw'; "
                        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"], check=True, capture_output=True,
                       timeout=30)

    def _start_slurmdbd(self) -> None:
        dbd = self.etc / "slurmdbd.conf"
        dbd.write_text(f"""DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
PidFile={self.run_dir / 'slurmdbd.pid'}
LogFile={self.log / 'slurmdbd.log'}
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
""")
        dbd.chmod(0o600)
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        self._wait("slurmdbd", lambda: self.cmd(["sacctmgr", "-n", "show", "cluster"], check=False,
                                                timeout=5).returncode == 0, self.log / "slurmdbd.log")

    def _write_slurm_conf(self) -> None:
        (self.etc / "plugstack.conf").write_text("")
        self.dbd_port = free_port()
        self.conf.write_text(f"""ClusterName=itest
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={self.root / 'spool/ctld'}
SlurmdSpoolDir={self.root / ('spool/d-%n' if self.multi else 'spool/d')}
SlurmctldPidFile={self.run_dir / 'slurmctld.pid'}
SlurmdPidFile={self.run_dir / ('slurmd-%n.pid' if self.multi else 'slurmd.pid')}
SlurmctldLogFile={self.log / 'slurmctld.log'}
SlurmdLogFile={self.log / ('slurmd-%n.log' if self.multi else 'slurmd.log')}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={self.etc / 'plugstack.conf'}
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={self.dbd_port}
AccountingStoragePass={self.munge_socket}
JobCompType=jobcomp/filetxt
JobCompLoc={self.log / 'jobcomp.txt'}
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
{self._node_lines()}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
{self.extra_conf}""")

    def _node_lines(self) -> str:
        """One NodeName line per node; with several, each slurmd listens on its own port."""
        lines = []
        for node in [*self.nodes, *self.dead_nodes]:
            port = f" Port={free_port()}" if self.multi else ""
            lines.append(f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname=localhost{port} CPUs=8 RealMemory=1000 "
                         "State=UNKNOWN")
        return "\n".join(lines)

    # ----------------------------------------------------------------- clients
    def cmd(self, argv: list[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (argv only, never a shell)."""
        try:
            proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, cwd=self.out)
        except subprocess.TimeoutExpired as exc:
            if check:
                raise ClusterError(f"{argv} timed out after {timeout} s") from None
            return subprocess.CompletedProcess(argv, 124, exc.stdout or "", exc.stderr or "")
        if check and proc.returncode != 0:
            raise ClusterError(f"{argv} exited {proc.returncode}: {proc.stderr.strip()}\n"
                               f"--- slurmctld.log\n{log_tail(self.log / 'slurmctld.log')}")
        return proc

    def sbatch(self, name: str, script: str, *extra: str) -> str:
        """Submit a --wrap job; returns its job id."""
        out = self.cmd(["sbatch", "--parsable", "-J", name, "-o", str(self.out / "%j.out"), *extra, "--wrap", script])
        return out.stdout.strip().split(";")[0]

    def job_state(self, job: str) -> str:
        """The job's state now: squeue while it is known there, else scontrol (kept MinJobAge s)."""
        line = self.cmd(["scontrol", "show", "job", "-o", job], check=False).stdout
        for token in line.split():
            if token.startswith("JobState="):
                return token.split("=", 1)[1]
        return ""

    def wait_state(self, job: str, states: set[str], timeout: float) -> str:
        """Poll until the job reaches one of ``states``; ClusterError with the logs after ``timeout``."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state in states:
                return state
            time.sleep(0.5)
        raise ClusterError(f"job {job} still {state or 'unknown'} after {timeout:.0f} s, wanted {sorted(states)}\n"
                           f"--- slurmctld.log\n{log_tail(self.log / 'slurmctld.log')}\n"
                           f"--- slurmd.log\n{log_tail(self.log / 'slurmd.log')}")


def tools_missing() -> list[str]:
    """Daemons and clients the cluster needs that are not installed (scripts/system-deps.sh installs them)."""
    needed = ("munged", "mungekey", "mariadbd", "mariadb-install-db", "mariadb-admin", "mariadb", "slurmdbd",
              "slurmctld", "slurmd", "sbatch", "sacct", "sacctmgr", "scontrol", "sinfo", "squeue", "scancel")
    return [name for name in needed if shutil.which(name) is None]
