"""The trainers' own code for the compatibility tests: ``../shared/trainers``' pinned archives, unpacked,
with a Python that runs them. Built once per machine and cached, keyed by the archives' hashes.

``python -m tests.trainers`` builds it ahead of the tests (they build it on first use otherwise) and prints
where; ``python -m tests.trainers --env`` prints ``export`` lines (the trees, their Python) that the CPU
launch files read (config/train/megatron-cpu.yaml). The cache is ``$SNAKEPACK_TRAINERS_CACHE`` (default
``~/.cache/snakepack/trainers``); the archives are ``$SNAKEPACK_TRAINERS`` (default ``../shared/trainers``
beside the checkout).

Only the package registry is used: the requirements of GPT-NeoX's own ``requirements/requirements.txt``
and DeeperSpeed's (their git pins are the archives), Megatron-LM's ``torch numpy packaging`` and the
``triton`` its argument code imports. Two stand-ins, both forced by what the registry offers (torch 2.13
and 2.14 CPU builds for this Python only), named here so that no one takes them for the pins:

- The LUMI fork pins DeeperSpeed 02e2ebf, which imports a torch name removed in torch 2.4
  (``torch.distributed.elastic.agent.server.api.log``). Both GPT-NeoX trees run with upstream's pin
  (91d1c55); what the tests use of it (the launcher's constants, ``DeepSpeedConfig``'s keys) is the same.
- Megatron-LM at its pin declares Python >= 3.12, and its argument code uses one 3.12 name,
  ``typing.override`` (a marker decorator): a ``sitecustomize`` in this Python gives it
  ``typing_extensions.override``. Megatron-LM's code itself is run as it is.
- Left out of GPT-NeoX's requirements: ``lm_eval`` (the evaluation harness) and ``mpi4py`` (needs an MPI
  build); no test imports them.

Megatron-Bridge, the converter Megatron-LM's users take between Hugging Face and Megatron, is the anchor of
our Megatron import and export (tests/train/hf/bridge.py, test_bridge_compat.py). It runs in a venv of its
own (``bridge()``, cached under ``bridge-{hash of BRIDGE}``): it needs its own Megatron-core release, and the
pinned Megatron-LM tree is Megatron-core 0.20.0-dev. The pins are the newest releases for this Python:
megatron-bridge 0.4 and later and megatron-core 0.17 and later declare Python >= 3.12, so megatron-bridge
0.3.1 (it asks for megatron-core < 0.17) and megatron-core 0.16.1 (its cp311 wheel). Both are installed
without their declared dependencies, which pull transformer-engine, mamba-ssm, causal-conv1d and others
that cannot be installed or run without CUDA; what the LLaMA conversion imports is installed instead
(BRIDGE: transformers < 5 as megatron-bridge asks, rich, omegaconf, einops, psutil (Megatron-core's torch_dist
writer: without it its writer process dies and the save waits forever), and the same triton and torch
as above). The stand-ins its code needs on a CPU are named in tests/train/hf/bridge.py.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHIVES = Path(os.environ.get("SNAKEPACK_TRAINERS") or REPO.parent / "shared" / "trainers")
CACHE = Path(os.environ.get("SNAKEPACK_TRAINERS_CACHE") or Path.home() / ".cache" / "snakepack" / "trainers")
KEEP = int(os.environ.get("SNAKEPACK_TRAINERS_KEEP") or 2)  # builds kept per kind (about 2 GB each)

TREES = {  # the name tests use -> the archive's name before the commit
    "neox": "gpt-neox",
    "fork": "llm-gpt-neox",
    "megatron": "Megatron-LM",
    "deeperspeed": "DeeperSpeed-91d1c55ba037",  # upstream GPT-NeoX's pin, used for both trees (see above)
    "lm_dataformat": "lm_dataformat",
}
SKIPPED = re.compile(r"^(lm_eval|mpi4py|deepspeed|lm_dataformat)\b")
# gigatoken: Megatron-LM's tools/preprocess_data_fast.py (--use-gigatoken), which bench_tokenize_bpe times.
EXTRA = ["torch==2.13.0", "packaging>=24.2", "triton==3.6.0", "setuptools<81", "typing_extensions", "pyyaml"]
EXTRA += ["gigatoken>=0.10,<0.11"]
# Megatron-Bridge's venv (see the docstring): the two packages without their dependencies; what they import.
BRIDGE_NO_DEPS = ["megatron-core==0.16.1", "megatron-bridge==0.3.1"]
BRIDGE = ["torch==2.13.0", "transformers==4.57.6", "triton==3.6.0", "numpy<3", "packaging>=24.2"]
BRIDGE += ["rich==15.0.0", "omegaconf==2.4.0", "einops==0.8.2", "psutil==7.2.2", "pyyaml"]
SITECUSTOMIZE = '''"""Megatron-LM at its pin wants Python 3.12's typing.override (a marker): backported."""
import typing

if not hasattr(typing, "override"):
    import typing_extensions

    typing.override = typing_extensions.override
'''

# The start of a script run in Megatron-LM's tree (Trainers.run("megatron", ["-c", MEGATRON_ARGS + ...])):
# ``parsed(argv)`` is pretrain_gpt.py's arguments as Megatron-LM's own parse_args + validate_args leave them,
# set as its global arguments. The one stub: validate_args asks the GPU's compute capability (no GPU here).
MEGATRON_ARGS = r"""
import contextlib, io, sys
from megatron.training import arguments, global_vars

arguments.get_device_arch_version = lambda: 9  # stub: the GPU's compute capability (no GPU here)

def parsed(argv, build_tokenizer=True):
    sys.argv = ["pretrain_gpt.py", *argv]
    with contextlib.redirect_stdout(io.StringIO()):
        args = arguments.parse_args()
        arguments.validate_args(args)
    global_vars.unset_global_variables()
    global_vars.set_global_variables(args, build_tokenizer=build_tokenizer)
    return args
"""

# After MEGATRON_ARGS, in a script run in Megatron-LM's tree with argv [script, JSON, PORT, LOCK]: one rank's
# process group (gloo, world size 1) and model-parallel groups, the C++ dataset helpers built as
# initialize_megatron builds them (one build at a time on this machine: LOCK), and pretrain_gpt's dataset
# provider as its __main__ sets it. The one stub: the data loaders' flags go to 'cuda' to be broadcast.
MEGATRON_ONE_RANK = r"""
import fcntl, json, os
import torch
from megatron.core import mpu
from megatron.core.datasets.utils import compile_helpers
from megatron.training import checkpointing, training

_tensor = torch.tensor
def _cpu_tensor(*args, **kwargs):  # stub: the data loaders' flags go to 'cuda' to be broadcast
    if kwargs.get("device") == "cuda":
        kwargs["device"] = "cpu"
    return _tensor(*args, **kwargs)
torch.tensor = _cpu_tensor

address = f"tcp://127.0.0.1:{sys.argv[2]}"
torch.distributed.init_process_group("gloo", init_method=address, rank=0, world_size=1)
mpu.initialize_model_parallel()
with open(sys.argv[3], "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    compile_helpers()  # a no-op once built
import pretrain_gpt
pretrain_gpt.train_valid_test_datasets_provider.is_distributed = True
"""


class Missing(RuntimeError):
    """No archives: the checkout is not beside ``shared/`` (a user's checkout)."""


@dataclass(frozen=True)
class Venv:
    """A cached folder whose ``venv`` is the Python that runs what it holds."""

    root: Path

    @property
    def python(self) -> str:
        return str(self.root / "venv" / "bin" / "python")

    def _run(
        self, argv: list[str], cwd: Path, env: dict[str, str], **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONWARNINGS": "ignore", **env}
        return subprocess.run(
            [self.python, *argv], cwd=cwd, env=env, capture_output=True, text=True, check=False, **kwargs
        )


@dataclass(frozen=True)
class Trainers(Venv):
    """The unpacked trees and the Python that runs them."""

    def tree(self, name: str) -> Path:
        """The source folder of ``neox``, ``fork`` or ``megatron``."""
        return next((self.root / "src").glob(f"{TREES[name]}*/*"))

    def run(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        """``python argv`` in the tree's folder with the tree on the path (``env``: more variables); never
        raises on failure."""
        src = self.tree(name)
        return self._run(argv, src, {"PYTHONPATH": str(src), **(env or {})}, **kwargs)

    def helpers_env(self) -> dict[str, str]:
        """The variables Megatron-LM's C++ dataset helpers compile under (``compile_helpers`` runs make):
        this Python on the path (its Makefile's python3), and that Python's suffix, not python3-config's."""
        suffix = subprocess.run(
            [self.python, "-c", "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return {
            "PATH": f"{Path(self.python).parent}{os.pathsep}{os.environ['PATH']}",
            "MAKEFLAGS": f"LIBEXT={suffix}",
        }

    @property
    def helpers_lock(self) -> str:
        """A lock file: one helpers build at a time on this machine (tests run on two workers)."""
        return str(self.root.with_name(f"{self.root.name}.helpers.lock"))


@dataclass(frozen=True)
class Bridge(Venv):
    """Megatron-Bridge's venv."""

    def run(self, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        """``python argv`` in the repository; never raises on failure."""
        return self._run(argv, REPO, {}, **kwargs)


def archives() -> list[Path]:
    found = sorted(ARCHIVES.glob("*.tar.gz"))
    if not found:
        raise Missing(
            f"{ARCHIVES} holds no trainer archives (a checkout without ../shared): the compatibility checks "
            "against GPT-NeoX and Megatron-LM need their pinned sources; set SNAKEPACK_TRAINERS to a folder "
            "of them"
        )
    return found


def requirements(src: Path) -> list[str]:
    """GPT-NeoX's and DeeperSpeed's requirements as their files give them, git pins and left-outs dropped."""
    lines: list[str] = []
    for path in (
        next(src.glob("gpt-neox*/gpt-neox/requirements/requirements.txt")),
        next(src.glob(f"{TREES['deeperspeed']}*/*/requirements/requirements.txt")),
    ):
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            if line and not SKIPPED.match(line) and "git+" not in line:
                lines.append(line)
    return sorted(set(lines))


def key(found: list[Path]) -> str:
    digest = hashlib.sha256(f"{sys.version_info[:2]} {EXTRA} {SITECUSTOMIZE}".encode())
    for path in found:
        digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def build(root: Path, found: list[Path]) -> None:
    """Unpack every archive into ``root/src/{archive}/`` and make ``root/venv``."""
    src = root / "src"
    for path in found:
        with tarfile.open(path) as tar:
            tar.extractall(src / path.name.removesuffix(".tar.gz"), filter="data")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *EXTRA, *requirements(src)], check=True)
    deeperspeed = next(src.glob(f"{TREES['deeperspeed']}*/*"))
    subprocess.run(
        [*pip, "--no-deps", "--no-build-isolation", str(deeperspeed)],
        check=True,
        env={**os.environ, "DS_BUILD_OPS": "0"},
    )
    subprocess.run([*pip, str(next(src.glob("lm_dataformat*/*")))], check=True)
    site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "sitecustomize.py").write_text(SITECUSTOMIZE)


def trainers() -> Trainers:
    """The cached build for these archives, built now if missing (one builder at a time per machine)."""
    found = archives()
    root = CACHE / key(found)
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "ready").exists():
            print(f"building the trainers' environment in {root} (once per machine)", file=sys.stderr)
            shutil.rmtree(root, ignore_errors=True)
            build(root, found)
            (root / "ready").write_text("\n".join(p.name for p in found) + "\n")
        drop_least_recently_used(root, lambda p: not p.name.startswith("bridge-"))
    return Trainers(root)


def build_bridge(root: Path) -> None:
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, *BRIDGE], check=True)
    subprocess.run([*pip, "--no-deps", *BRIDGE_NO_DEPS], check=True)


def bridge() -> Bridge:
    """The cached Megatron-Bridge venv, built now if missing (one builder at a time per machine)."""
    pins = f"{sys.version_info[:2]} {BRIDGE} {BRIDGE_NO_DEPS}"
    root = CACHE / f"bridge-{hashlib.sha256(pins.encode()).hexdigest()[:16]}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "ready").exists():
            print(f"building Megatron-Bridge's environment in {root} (once per machine)", file=sys.stderr)
            shutil.rmtree(root, ignore_errors=True)
            build_bridge(root)
            (root / "ready").write_text(pins + "\n")
        drop_least_recently_used(root, lambda p: p.name.startswith("bridge-"))
    return Bridge(root)


def drop_least_recently_used(root: Path, same_kind: Callable[[Path], bool]) -> None:
    """Mark ``root`` used (its ``ready`` file's time) and remove the builds of its kind beyond the ``KEEP``
    most recently used, each only while no one holds its lock."""
    os.utime(root / "ready")
    builds = [p for p in CACHE.iterdir() if (p / "ready").is_file() and same_kind(p)]
    for other in sorted(builds, key=lambda p: (p / "ready").stat().st_mtime, reverse=True)[KEEP:]:
        with open(CACHE / f"{other.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being built or checked now
            shutil.rmtree(other, ignore_errors=True)


def launch_variables(built: Trainers) -> dict[str, str]:
    """The variables that run the trainers' own code by hand or from the CPU launch files
    (config/train/megatron-cpu.yaml): the trees, their Python, and the suffix Megatron-LM's helpers build
    with (its Makefile asks ``python3-config``, which on PATH may be another Python's)."""
    return {
        "MEGATRON_LM": str(built.tree("megatron")),
        "GPT_NEOX": str(built.tree("neox")),
        "GPT_NEOX_FORK": str(built.tree("fork")),
        "DEEPERSPEED": str(built.tree("deeperspeed")),
        "TRAINERS_PYTHON": built.python,
        "MAKEFLAGS": built.helpers_env()["MAKEFLAGS"],
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--env"]:  # eval "$(.venv/bin/python -m tests.trainers --env)"
        for name, value in launch_variables(trainers()).items():
            print(f"export {name}={shlex.quote(value)}")
    else:
        print(trainers().root)
        print(bridge().root)
