"""The tests and Slurm: the test cluster they may use, a watchdog while they use it, and Slurm's client where
no controller answers.

The test cluster is the one ``tests/slurm/local-cluster.sh start`` started and recorded in its state file
(``STATE``, ``$SNAKEPACK_SLURM_STATE`` in the tests of this module): its configuration, cluster name, port and
slurmctld's PID file. The Slurm tests (marker ``slurm``) run only while that cluster is up, with
``SLURM_CONF`` pointing at its configuration, and skip with the reason otherwise (tests/conftest.py): another
Slurm that happens to answer is never used. While one runs, a ``Watchdog`` checks the cluster; once it is
gone, the test's subprocesses are stopped, so that a run polling a vanished cluster fails within seconds
(the Slurm executor plugin retries a failed ``squeue`` forever).

Where Slurm's client is installed but no controller answers, every Snakemake start would wait for it.

The Slurm executor plugin asks ``scontrol show config`` when it is imported, and Snakemake imports every
installed plugin at each start, whatever the executor. Where Slurm's client is installed but its controller
is down (this machine after ``tests/slurm/local-cluster.sh stop``), the client retries the connection for
the configuration's ``MessageTimeout`` (10 s by default) before it gives up: about 9 s per Snakemake start.
The tests then run their subprocesses with ``SLURM_CONF`` pointing at a copy of the configuration whose
``MessageTimeout`` is 1 s, so the client gives up at once; the Slurm tests skip in that state anyway. A
controller that answers leaves everything as it is. docs/scale.md says what users on such machines see.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
DEFAULT_PORT = 6817  # slurmctld's port when the configuration names none
STATE = Path(os.environ.get("SNAKEPACK_SLURM_STATE") or "/run/slurm-local/cluster")


def _setting(conf: str, key: str) -> str | None:
    found = re.search(rf"^\s*{key}\s*=\s*(\S+)", conf, re.IGNORECASE | re.MULTILINE)
    return found.group(1) if found else None


def controller_answers(conf: str, timeout_s: float = 1.0) -> bool:
    """Whether slurmctld accepts a connection at the configuration's first controller host and port."""
    host = _setting(conf, "SlurmctldHost") or _setting(conf, "ControlMachine") or "localhost"
    host = host.split("(")[0]  # SlurmctldHost=name(address)
    port = _setting(conf, "SlurmctldPort")
    try:
        with socket.create_connection((host, int(port.split("-")[0]) if port else DEFAULT_PORT), timeout_s):
            return True
    except OSError:
        return False


def fail_fast_conf(workdir: Path) -> Path | None:
    """A copy of this machine's Slurm configuration with ``MessageTimeout=1``, written in ``workdir``, when
    Slurm's client is installed and its controller does not answer; ``None`` otherwise."""
    conf_path = Path(os.environ.get("SLURM_CONF") or DEFAULT_CONF)
    if shutil.which("scontrol") is None or not conf_path.is_file():
        return None
    conf = conf_path.read_text(errors="replace")
    if controller_answers(conf):
        return None
    quiet = re.sub(r"^\s*MessageTimeout\s*=.*$", "", conf, flags=re.IGNORECASE | re.MULTILINE)
    path = workdir / "slurm.conf"
    path.write_text(f"{quiet.rstrip()}\nMessageTimeout=1\n")
    return path


@dataclass(frozen=True)
class Cluster:
    """The test cluster as tests/slurm/local-cluster.sh recorded it."""

    conf: Path
    name: str
    port: int
    pidfile: Path

    def gone(self) -> str | None:
        """Why this cluster cannot take the tests' jobs now (its slurmctld is not running, its configuration
        names another cluster, nothing answers on its port), or None."""
        try:
            pid = int(self.pidfile.read_text().strip())
            alive = Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld"
        except (OSError, ValueError):
            alive = False
        if not alive:
            return f"slurmctld is not running ({self.pidfile}: no live slurmctld)"
        try:
            conf = self.conf.read_text(errors="replace")
        except OSError as error:
            return f"{self.conf}: {error.strerror}"
        name, port = _setting(conf, "ClusterName"), _setting(conf, "SlurmctldPort")
        if (name, port) != (self.name, str(self.port)):
            return f"{self.conf} names cluster {name} port {port}, not {self.name} port {self.port}"
        if not controller_answers(conf):
            return f"nothing answers on port {self.port}"
        return None


def harness_cluster(state: Path = STATE) -> Cluster | str:
    """The test cluster recorded in ``state`` while it is up, else why there is none."""
    try:
        text = state.read_text()
    except FileNotFoundError:
        return (
            f"no test cluster: {state} is missing (start one: sudo bash tests/slurm/local-cluster.sh start)"
        )
    fields = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    try:
        cluster = Cluster(
            Path(fields["conf"]), fields["cluster"], int(fields["port"]), Path(fields["pidfile"])
        )
    except (KeyError, ValueError) as error:
        return f"{state}: not a test cluster's record ({error!r})"
    why = cluster.gone()
    return f"test cluster {cluster.name} ({state}): {why}" if why else cluster


class Watchdog:
    """While a Slurm test runs: checks its cluster every ``interval_s``; once the cluster has been gone for
    ``grace_s``, says why in ``lost`` and stops this process's subprocesses (SIGTERM, SIGKILL after
    ``kill_after_s``), so that the test waiting on them fails now."""

    def __init__(
        self, cluster: Cluster, interval_s: float = 2.0, grace_s: float = 10.0, kill_after_s: float = 10.0
    ):
        self.cluster, self.interval_s, self.grace_s, self.kill_after_s = (
            cluster,
            interval_s,
            grace_s,
            kill_after_s,
        )
        self.lost: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="slurm-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        gone_since = None
        while not self._done.wait(self.interval_s):
            why = self.cluster.gone()
            if why is None:
                gone_since = None
                continue
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since >= self.grace_s:
                self.lost = why
                _stop(_children(os.getpid()), self.kill_after_s)
                return


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    return [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat") if _parent(stat) == pid]


def _parent(stat: Path) -> int | None:
    """The parent of a live (not zombie) process, from its ``/proc/PID/stat``; None once it is gone."""
    try:
        state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
    except (OSError, ValueError):
        return None
    return None if state == "Z" else int(ppid)


def _stop(pids: list[int], kill_after_s: float) -> None:
    """SIGTERM to ``pids``, then SIGKILL to those still there ``kill_after_s`` later."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + kill_after_s
    while time.monotonic() < deadline and any(_parent(Path(f"/proc/{pid}/stat")) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if _parent(Path(f"/proc/{pid}/stat")):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
