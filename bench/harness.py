"""Shared helpers of the benchmarks: the project's CLI, timing, child processes, result lines and files, data.

Scripts in bench/ import it as a sibling module (``import harness``). It imports only the standard library
when loaded: it also runs as the measuring wrapper (``python bench/harness.py CMD ...``, see
``run_isolated``) and inside other tools' venvs (bench_dedup's datatrove stages).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
WORK = BENCH / "_work"  # git-ignored scratch space
RESULTS = BENCH / "results"
MB = 1_000_000
T = TypeVar("T")
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def cli(command: str, *args: str | os.PathLike[str] | float) -> list[str]:
    """Command line running ``snakepack COMMAND ARGS`` (as ``python -m workflow_scripts``, like the rules)."""
    return [sys.executable, "-m", "workflow_scripts", command, *map(str, args)]


def copy_workflow(root: Path) -> None:
    """A fresh copy of the workflow (its files, no results) in ``root``, made as the tests make theirs
    (``tests.utils.Workflow``: one list of the workflow's files for both)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.utils import Workflow

    shutil.rmtree(root, ignore_errors=True)
    Workflow(root)


def refresh_workflow(root: Path) -> None:
    """Copy the workflow's current files over those of a kept copy in ``root``; its results stay."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.utils import WORKFLOW_FILES

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".snakemake")
    for name in WORKFLOW_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=ignore, dirs_exist_ok=True)
        else:
            shutil.copy2(src, root / name)


# ---------------------------------------------------------------- timing


def timed(fn: Callable[[], object], fsync: Path | None = None) -> float:
    """Seconds taken by ``fn``, after flushing dirty pages (untimed), plus an fsync of ``fsync`` if given."""
    os.sync()
    start = time.perf_counter()
    fn()
    if fsync is not None:
        fd = os.open(fsync, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def rounds(names: Sequence[str], repeats: int, rotate: bool = False) -> Iterator[tuple[int, str]]:
    """(round, step) of ``repeats`` rounds, each running every step once (load from other users of the
    machine hits all steps alike); with ``rotate``, round r starts at step r (no step always goes first)."""
    for r in range(repeats):
        k = r % len(names) if rotate else 0
        for name in [*names[k:], *names[:k]]:
            yield r, name


def best(runs: Mapping[str, Iterable[T]], key: Callable[[T], Any] | None = None) -> dict[str, T]:
    """The best (least, or of least ``key``) result of each step."""
    return {name: min(results, key=key) for name, results in runs.items()}


# ---------------------------------------------------------------- child processes


@dataclass(frozen=True)
class Measured:
    """Wall seconds, CPU seconds (user + sys), peak RSS (MiB) and captured stdout of a run."""

    wall: float
    cpu: float = 0.0
    rss_mib: float = 0.0
    output: str = ""


def peak_rss_mib(children: bool = False) -> float:
    """Peak RSS (MiB) of this process, or the largest of its children waited for so far."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024  # KiB on Linux


def _tree_rss_kb(pid: int) -> int:
    """Resident memory (kB) of ``pid`` and all its descendants, from /proc (0 once it has exited)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        total += next((int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:")), 0)
        todo += map(int, children)
    return total


def _sampled_peak_kb(proc: subprocess.Popen[bytes]) -> int:
    """Largest resident memory (kB) of ``proc``'s process tree, sampled every 20 ms until it exits."""
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kb(proc.pid))
        time.sleep(0.02)
    return peak


def _text(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


def run_child(
    cmd: Sequence[str], *, capture: bool = True, sample_rss: bool = False, **kwargs: Any
) -> Measured:
    """Run ``cmd`` (RuntimeError if it fails) and measure it; ``kwargs`` go to Popen.

    CPU: RUSAGE_CHILDREN's growth meanwhile. Peak RSS: with ``sample_rss``, the process tree's resident
    memory sampled from /proc (a child's ``ru_maxrss`` would include this process's memory at fork); else
    RUSAGE_CHILDREN's ``ru_maxrss`` (the largest child waited for so far). With ``capture``, its stdout is
    kept (stderr only for the error message); else both go to ours.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        streams = {"stdout": out, "stderr": err} if capture else {}
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, **streams, **kwargs)
        peak_kb = _sampled_peak_kb(proc) if sample_rss else None
        proc.wait()
        wall = time.perf_counter() - start
        stdout, stderr = _text(out), _text(err)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(
            f"{shlex.join(cmd[:4])} ... failed ({proc.returncode}):\n{stdout[-3000:]}{stderr[-3000:]}"
        )
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Measured(wall, cpu, (after.ru_maxrss if peak_kb is None else peak_kb) / 1024, stdout)


def run_isolated(cmd: Sequence[str], **kwargs: Any) -> Measured:
    """``run_child`` under a fresh, small wrapper process (this module), so that the peak RSS is that of
    ``cmd`` and its children alone; the wall and CPU seconds include the wrapper's."""
    m = run_child([sys.executable, str(BENCH / "harness.py"), *cmd], **kwargs)
    *out, last = m.output.rstrip("\n").split("\n")
    return replace(m, rss_mib=json.loads(last)["rss_mib"], output="\n".join(out))


def _wrap(cmd: list[str]) -> int:
    """(wrapper mode) Run ``cmd``, then print the peak RSS of it and its waited-for children last."""
    rc = subprocess.run(cmd).returncode
    print(json.dumps({"rss_mib": peak_rss_mib(children=True)}))
    return rc


# ---------------------------------------------------------------- printing and keeping results


def run_line(r: int, name: str, seconds: float, nbytes: int) -> None:
    """Print one timed run: round (from 0), step, seconds and the MB/s of ``nbytes``."""
    print(f"run {r + 1} {name:5s} {seconds:7.3f} s  {nbytes / seconds / MB:8.0f} MB/s")


def compare(ours: str, ours_rate: float, baseline: str, base_rate: float, unit: str = "MB/s") -> float:
    """Print a result table line of ``ours`` against ``baseline`` (rates: higher is better) with the ratio
    ours / baseline; return the ratio."""
    ratio = ours_rate / base_rate
    print(
        f"{ours:<26} {ours_rate:>9.1f} {unit}  vs  {baseline:<26} {base_rate:>9.1f} {unit}  ratio {ratio:.2f}"
    )
    return ratio


def portable(path: str | os.PathLike[str]) -> str:
    """A path as the tracked results may hold it: relative to the checkout when inside it, else only its
    name (no machine's paths in tracked files)."""
    resolved = Path(os.path.abspath(path))  # links kept: .venv/bin/python stays in the checkout
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else f"<outside>/{resolved.name}"


def _portable_values(value: Any) -> Any:
    """``value`` with every path (a PathLike, or a string that is an absolute path) made ``portable``."""
    if isinstance(value, dict):
        return {k: _portable_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_portable_values(v) for v in value]
    if isinstance(value, os.PathLike) or (isinstance(value, str) and os.path.isabs(value)):
        return portable(value)
    return value


def write_results(name: str, results: dict[str, Any]) -> Path:
    """Write ``results`` and the run's context to bench/results/{name}.json atomically; return the path."""
    record = {
        "benchmark": name,
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "command": shlex.join(_portable_values(list(sys.orig_argv))),
        "results": _portable_values(results),
    }
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=RESULTS)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    print(f"results written to {path.relative_to(ROOT)}")
    return path


# ---------------------------------------------------------------- synthetic data

DOC_BATCH = 20_000  # documents per add_documents call while generating


def make_input(prefix: Path, nbytes: int, dtype: np.dtype, rng: np.random.Generator) -> int:
    """Write an indexed dataset of about ``nbytes`` of random tokens, documents of 300-3000 tokens; return
    its document count."""
    import numpy as np

    from workflow_scripts.core.indexed_dataset import IndexedDatasetBuilder

    n_tokens = nbytes // dtype.itemsize
    lengths = rng.integers(300, 3001, n_tokens // 300 + 1)
    ends = np.cumsum(lengths)
    n_docs = int(np.searchsorted(ends, n_tokens)) + 1
    lengths = lengths[:n_docs]
    lengths[-1] -= int(ends[n_docs - 1]) - n_tokens
    high = 65_000 if dtype == np.uint16 else 250_000
    with IndexedDatasetBuilder(prefix, dtype) as b:
        for a in range(0, n_docs, DOC_BATCH):
            lens = lengths[a : a + DOC_BATCH]
            b.add_documents(rng.integers(0, high, int(lens.sum()), dtype=dtype), lens)
    return n_docs


if __name__ == "__main__":
    sys.exit(_wrap(sys.argv[1:]))
