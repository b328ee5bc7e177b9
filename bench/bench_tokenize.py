"""Benchmark the TOKENIZE CLI against SentencePiece's encode-only rate and Megatron's preprocess_data.py.

    .venv/bin/python bench/bench_tokenize.py [--mb 100] [--workers 2] [--repeats 2] [--no-megatron]

Steps (work dir bench/_work/tokenize, git-ignored; the corpus, model and Megatron venv are reused when
present):

1. Corpus: the embedded sample generator (``workflow_scripts.ingest.sample``, Faker text in
   en/de/fr/ru/zh/ja) at ``--scale``, its valid records cycled (ids made unique) into a ``--mb`` MB jsonl
   shard and a shard of a tenth of that size.
2. A BPE tokenizer (``--vocab-size``) trained with ``workflow_scripts.tokens.train_tokenizer`` on a few MB.
3. Alternating, ``--repeats`` times: SentencePiece encode-only over the big shard's texts already in
   memory, in the CLI's batches, with ``--workers`` threads (both the default int-list output and numpy
   output), and the CLI as a subprocess (wall time including start-up, reading, JSON, writing). Best of
   each; ratio = encode-only time / CLI time (1.0 = as fast as encoding alone).
4. Peak RSS of the CLI on the small and the 10x larger shard (memory independent of shard size).
5. Megatron-LM ``tools/preprocess_data.py`` (source exported from the local Megatron-LM mirror, a venv
   with torch in bench/_work) with the same model, ``--workers`` and ``--append-eod``; its output is
   compared byte for byte with the CLI's (EOD ``</s>``, which is what Megatron appends).
6. Compatibility: the CLI's small-shard output loaded with Megatron-LM's ``IndexedDataset`` and GPT-NeoX's
   ``MMapIndexedDataset`` (from the local GPT-NeoX mirror, when present), every document decoded back to
   its input text.

Results are printed and written to bench/results/tokenize.json.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import harness
import orjson
from harness import Measured

from workflow_scripts.core.fsio import atomic_path, open_binary

WORK = harness.WORK / "tokenize"
# Bare git checkouts of the reference tools, from the environment (or --megatron-git / --neox-git).
MEGATRON_GIT = os.environ.get("SNAKEPACK_MEGATRON_GIT", "")
NEOX_GIT = os.environ.get("SNAKEPACK_NEOX_GIT", "")
MEGATRON_PACKAGES = ["torch==2.13.0", "numpy", "sentencepiece", "packaging", "triton", "typing_extensions"]
# Megatron-LM HEAD uses typing.override (Python 3.12); on 3.11 the bench venv provides it.
SITECUSTOMIZE = "import typing\nimport typing_extensions\ntyping.override = typing_extensions.override\n"
BATCH_MB = 4.0


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- corpus and model -------------------------------------------------------------------------------------


def make_corpus(mb: float, scale: float) -> tuple[Path, Path]:
    """A ``mb`` MB shard and one of a tenth of that: the sample's valid records, interleaved across its files
    (so both shards have the same mix of languages and domains), cycled with fresh ids up to the size."""
    big, small = WORK / f"xx_bench_mix_split_{int(mb):04d}.jsonl", WORK / "xx_bench_mix_split_0000.jsonl"
    if big.exists() and small.exists():
        return big, small
    from workflow_scripts.ingest.sample import generate

    sample_dir = WORK / f"sample_{scale:g}"
    if not (sample_dir / "manifest.json").exists():
        log(f"generating the sample at scale {scale:g}")
        generate(sample_dir, seed=1234, scale=scale)
    per_file = []
    for path in sorted(sample_dir.iterdir()):
        if not path.name.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")):
            continue
        lang, domain, sub = path.name.split("_")[:3]
        records = []
        with open_binary(path) as f:
            for raw in f:
                try:
                    rec = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec.get("text"), str) and rec["text"].strip():
                    records.append({**rec, "lang": lang, "domain": domain, "subdomain": sub})
        per_file.append(records)
    mixed = [r for group in itertools.zip_longest(*per_file) for r in group if r is not None]
    for path, limit in ((small, mb * 1e5), (big, mb * 1e6)):
        size = 0
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            for k, rec in enumerate(itertools.cycle(mixed)):
                line = orjson.dumps({**rec, "id": f"{rec['id']}-r{k // len(mixed)}"}) + b"\n"
                f.write(line)
                size += len(line)
                if size >= limit:
                    break
        log(f"corpus {path.name}: {size / 1e6:.1f} MB")
    return big, small


def train_model(shard: Path, vocab_size: int) -> Path:
    prefix = WORK / f"bpe_{vocab_size}"
    if not prefix.with_suffix(".model").exists():
        cmd = harness.cli(
            "train-tokenizer",
            shard,
            "--model-prefix",
            prefix,
            "--vocab-size",
            vocab_size,
            "--model-type",
            "bpe",
            "--max-sentences",
            "40000",
        )
        m = harness.run_child(cmd, cwd=harness.ROOT)
        log(f"trained tokenizer in {m.wall:.1f}s: {m.output.strip().splitlines()[-1]}")
    return prefix.with_suffix(".model")


# --- measurements -----------------------------------------------------------------------------------------


def load_batches(shard: Path) -> tuple[list[list[str]], int]:
    """The shard's texts in batches of about BATCH_MB MB, as the CLI cuts them; and the input bytes."""
    batches: list[list[str]] = [[]]
    size = 0
    with open(shard, "rb") as f:
        data = f.read()
    for raw in data.splitlines():
        text = orjson.loads(raw)["text"]
        batches[-1].append(text)
        size += len(text.encode())
        if size >= BATCH_MB * (1 << 20):
            batches.append([])
            size = 0
    return [b for b in batches if b], len(data)


def encode_only(model: Path, batches: list[list[str]], workers: int, out_type: Any) -> Measured:
    """SentencePiece batched encode of texts already in memory, output discarded batch by batch."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        sp.encode(batch, num_threads=workers, out_type=out_type)
    return Measured(time.perf_counter() - start, time.process_time() - cpu)


def tokenize_cli(
    shard: Path, model: Path, prefix: Path, workers: int, *extra: str, eod: str = "</s>"
) -> Measured:
    """Our tokenize CLI on ``shard`` (EOD appended), timed, with its peak RSS; ``extra`` options last."""
    cmd = harness.cli(
        "tokenize",
        "--input",
        shard,
        "--output-prefix",
        prefix,
        "--tokenizer-model",
        model,
        "--append-eod",
        "--eod-piece",
        eod,
        "--workers",
        workers,
        "--batch-mb",
        BATCH_MB,
        *extra,
    )
    return harness.run_child(cmd, sample_rss=True, cwd=harness.ROOT)


# --- Megatron-LM and GPT-NeoX ----------------------------------------------------------------------------


def export(git_dir: str, paths: list[str], dest: Path) -> None:
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "HEAD", *paths], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def megatron_env(git_dir: str) -> tuple[Path, Path]:
    """(python, source dir) of a venv able to run Megatron-LM's preprocess_data.py; built once."""
    root = WORK / "megatron"
    src, venv = root / "src", root / "venv"
    python = venv / "bin" / "python"
    if not (src / "tools" / "preprocess_data.py").exists():
        export(git_dir, ["megatron", "tools"], src)
    if not python.exists():
        log("creating the Megatron venv (torch, once)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *MEGATRON_PACKAGES], check=True)
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        Path(site, "sitecustomize.py").write_text(SITECUSTOMIZE)
    harness.run_child([str(python), "tools/preprocess_data.py", "--help"], cwd=src)
    return python, src


def megatron_preprocess(
    python: Path, src: Path, shard: Path, model: Path, workers: int
) -> tuple[Measured, str]:
    prefix = WORK / "out" / "megatron"
    cmd = [
        str(python),
        "tools/preprocess_data.py",
        "--input",
        str(shard),
        "--output-prefix",
        str(prefix),
        "--tokenizer-type",
        "SentencePieceTokenizer",
        "--tokenizer-model",
        str(model),
        "--append-eod",
        "--workers",
        str(workers),
        "--json-keys",
        "text",
        "--log-interval",
        "100000000",
    ]
    return harness.run_child(cmd, sample_rss=True, cwd=src), f"{prefix}_text_document"


CHECK = r"""
import json, sys
import sentencepiece as spm
reader, root, prefix, model, shard = sys.argv[1:]
sys.path.insert(0, root)
if reader == "megatron":
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    ds = IndexedDataset(prefix)
    lengths, doc_idx = ds.sequence_lengths, ds.document_indices
else:
    from neox_indexed_dataset import MMapIndexedDataset
    ds = MMapIndexedDataset(prefix, skip_warmup=True)
    lengths, doc_idx = ds.sizes, ds.doc_idx
sp = spm.SentencePieceProcessor(model_file=model)
texts = [json.loads(line)["text"] for line in open(shard, encoding="utf-8")]
assert len(lengths) == len(texts) and list(doc_idx) == list(range(len(texts) + 1)), "index shape"
bad = sum(
    1 for i, t in enumerate(texts) if (ids := ds[i].tolist())[-1] != sp.eos_id() or sp.decode(ids[:-1]) != t
)
print(json.dumps({"reader": reader, "documents": len(texts), "mismatches": bad, "dtype": str(ds[0].dtype)}))
"""


def compat_check(
    python: Path, reader: str, root: Path, prefix: Path, model: Path, shard: Path
) -> dict[str, Any]:
    cmd = [str(python), "-c", CHECK, reader, str(root), str(prefix), str(model), str(shard)]
    out = harness.run_child(cmd).output
    return orjson.loads(out.strip().splitlines()[-1])


def neox_root(git_dir: str) -> Path:
    """GPT-NeoX's indexed_dataset.py alone, with a stub for its one ``megatron`` import (print_rank_0)."""
    root = WORK / "neox"
    if not (root / "neox_indexed_dataset.py").exists():
        export(git_dir, ["megatron/data/indexed_dataset.py"], root)
        (root / "megatron" / "data" / "indexed_dataset.py").rename(root / "neox_indexed_dataset.py")
        (root / "megatron" / "__init__.py").write_text("print_rank_0 = print\n")
    return root


# --- main ------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=100, help="size of the big shard in MB (default 100)")
    parser.add_argument("--scale", type=float, default=8, help="sample generator scale (distinct text)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--no-megatron", action="store_true", help="skip Megatron-LM and the reader checks")
    parser.add_argument(
        "--megatron-git", default=MEGATRON_GIT, help="bare git dir of Megatron-LM [$SNAKEPACK_MEGATRON_GIT]"
    )
    parser.add_argument("--neox-git", default=NEOX_GIT, help="bare git dir of GPT-NeoX [$SNAKEPACK_NEOX_GIT]")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    big, small = make_corpus(args.mb, args.scale)
    model = train_model(small, args.vocab_size)
    batches, input_bytes = load_batches(big)
    mb = input_bytes / 1e6
    res: dict[str, Any] = {
        "input_mb": round(mb, 1),
        "workers": args.workers,
        "vocab_size": args.vocab_size,
        "cpus": os.cpu_count(),
    }
    steps = {
        "encode_int": lambda: encode_only(model, batches, args.workers, int),
        "encode_numpy": lambda: encode_only(model, batches, args.workers, "numpy"),
        "cli": lambda: tokenize_cli(big, model, WORK / "out" / "ours", args.workers),
    }
    runs: dict[str, list[Measured]] = {name: [] for name in steps}
    for r, name in harness.rounds(list(steps), args.repeats):
        m = steps[name]()
        runs[name].append(m)
        log(f"round {r + 1}: {name} {m.wall:.2f}s wall {m.cpu:.2f}s cpu")
    best = harness.best({k: [m.wall for m in v] for k, v in runs.items()})
    median = {k: statistics.median(m.wall for m in v) for k, v in runs.items()}
    cpu = harness.best({k: [m.cpu for m in v] for k, v in runs.items()})
    for k in runs:
        res[k] = {
            "best_mb_s": round(mb / best[k], 2),
            "median_mb_s": round(mb / median[k], 2),
            "cpu_s": round(cpu[k], 2),
        }
    for base in ("encode_int", "encode_numpy"):
        harness.compare("tokenize CLI (best)", mb / best["cli"], f"{base} (best)", mb / best[base])
        res[f"ratio_vs_{base}"] = {
            "best_wall": round(best[base] / best["cli"], 3),
            "median_wall": round(median[base] / median["cli"], 3),
            "cpu": round(cpu[base] / cpu["cli"], 3),
        }
    small_prefix = WORK / "out" / "small"
    res["peak_rss_mb"] = {
        "small": int(tokenize_cli(small, model, small_prefix, args.workers).rss_mib),
        "big_10x": int(max(m.rss_mib for m in runs["cli"])),
    }

    if args.no_megatron:
        log("Megatron-LM skipped (--no-megatron)")
    elif not args.megatron_git:
        log("Megatron-LM SKIPPED: give --megatron-git or SNAKEPACK_MEGATRON_GIT")
    else:
        try:
            python, src = megatron_env(args.megatron_git)
            meg, meg_prefix = megatron_preprocess(python, src, big, model, args.workers)
        except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
            log(f"Megatron-LM skipped: it cannot run here ({str(exc).strip().splitlines()[-1]})")
        else:
            harness.compare(
                "tokenize CLI (median)", mb / median["cli"], "Megatron preprocess_data", mb / meg.wall
            )
            res["megatron"] = {
                "wall_mb_s": round(mb / meg.wall, 2),
                "cpu_s": round(meg.cpu, 2),
                "peak_rss_mb": int(meg.rss_mib),
            }
            res["ratio_cli_vs_megatron"] = {
                "wall": round(meg.wall / median["cli"], 2),
                "cpu": round(meg.cpu / cpu["cli"], 2),
            }
            ours = f"{WORK / 'out' / 'ours'}_text_document"
            res["identical_to_megatron"] = all(
                Path(ours + ext).read_bytes() == Path(meg_prefix + ext).read_bytes()
                for ext in (".bin", ".idx")
            )
            small_doc = Path(f"{small_prefix}_text_document")
            res["readers"] = [compat_check(python, "megatron", src, small_doc, model, small)]
            if args.neox_git and Path(args.neox_git).exists():
                res["readers"].append(
                    compat_check(python, "neox", neox_root(args.neox_git), small_doc, model, small)
                )
            else:
                log(f"GPT-NeoX reader SKIPPED: none at {args.neox_git!r} (SNAKEPACK_NEOX_GIT)")
    print(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode())
    harness.write_results("tokenize", {"args": vars(args), **res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
