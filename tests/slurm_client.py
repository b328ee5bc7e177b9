"""Slurm's client where no controller answers: every Snakemake start would wait for it.

The Slurm executor plugin asks ``scontrol show config`` when it is imported, and Snakemake imports every
installed plugin at each start, whatever the executor. Where Slurm's client is installed but its controller
is down (this machine after ``tests/slurm/local-cluster.sh stop``), the client retries the connection for
the configuration's ``MessageTimeout`` (10 s by default) before it gives up: about 9 s per Snakemake start.
The tests then run their subprocesses with ``SLURM_CONF`` pointing at a copy of the configuration whose
``MessageTimeout`` is 1 s, so the client gives up at once; the Slurm tests skip in that state anyway. A
controller that answers leaves everything as it is. docs/scale.md says what users on such machines see.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
DEFAULT_PORT = 6817  # slurmctld's port when the configuration names none


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
