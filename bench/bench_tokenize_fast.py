"""Benchmark the tokenize CLI's fast path on a real multilingual corpus against SentencePiece's own encode
and gigatoken's.

    .venv/bin/python bench/bench_tokenize_fast.py [--workers 2] [--repeats 3] [--no-megatron] [--no-plain]

Steps (work dir bench/_work/tokenize_fast, git-ignored; corpus and model are reused when present):

1. Corpus: Debian packages of man pages in many languages, the Debian handbook and reference, fortunes,
   Linux and Python documentation (``PACKAGES``, fetched with ``apt-get download``, unpacked with
   ``dpkg-deb -x``), one document per file (HTML tags stripped), one per fortune: at least 200 MB of jsonl.
2. A 32k BPE model trained with the workflow's trainer (identity normalization, whitespace kept, byte
   fallback) on 200,000 sampled lines.
3. Interleaved rounds (best of ``--repeats``): (a) SentencePiece's batched ``encode`` of the texts already
   in memory, in the CLI's 4 MB batches, with ``--workers`` threads (int lists and numpy output), and
   gigatoken's (``from_sentencepiece``, ``encode_batch`` on its thread pool of ``--workers``), and (c) the
   tokenize CLI end to end (read jsonl, write .bin/.idx) with ``--workers``, fast path on: its default
   engine (gigatoken where exact) and the unit memo (``--engine memo``); the CLI with the fast path off once
   (``--no-plain`` skips it). Ratio = encode-only time / CLI time; the CPU ratio (CPU seconds, all threads)
   is what a busy shared machine shows best.
4. Identity: every document of the CLI's output equals ``sp.encode(text) + [EOD]`` (gigatoken's own
   in-memory ids do not: it reads ``<s>`` and ``</s>`` in text as control tokens; the count is printed), and
   the two engines' files are identical.
5. (b) Megatron-LM ``tools/preprocess_data.py`` with the same model and workers (``SNAKEPACK_MEGATRON_GIT``,
   see bench_tokenize.py), its bytes compared with ours.
6. Memory: the CLI's peak RSS (process tree) on a tenth of the corpus and on all of it.
7. Profile: cProfile of the unit memo (one SentencePiece thread) over the first 40 MB (where the time
   goes: the compiled memo's ``scan``/``emit``, SentencePiece on the missing units).

Results are printed and written to bench/results/tokenize_fast.json.
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import io
import os
import pstats
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's workflow_scripts, first

import bench_tokenize
import harness
import numpy as np
import orjson
from harness import Measured

WORK = harness.WORK / "tokenize_fast"
LANGS = "de fr ja ru zh pl es it pt-br cs nl uk ro vi fi hu sv el da"  # man page translations
PACKAGES = [
    *(f"manpages-{lang}" for lang in LANGS.split()),
    *(f"manpages-{lang}-dev" for lang in ("de", "fr", "ja", "ru", "pl", "es", "it")),
    "manpages-dev",
    "debian-handbook",
    *(f"debian-reference-{lang}" for lang in ("de", "fr", "ja", "zh-cn", "es", "it", "pt", "en")),
    *(f"fortunes-{lang}" for lang in ("de", "ru", "zh", "es", "it", "pl", "min")),
    "linux-doc-6.1",
    "python3.11-doc",
]
SKIP = (".png", ".gif", ".svg", ".xpm", ".css", ".js", ".dat", ".jpg", ".ico", ".woff", ".ttf", ".pdf", ".u8")
TAG = re.compile(r"<[^>]+>")
BATCH_MB = bench_tokenize.BATCH_MB  # the batches of the encode-only baseline and of the CLI
EOD = "<|endoftext|>"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_corpus() -> Path:
    """The jsonl corpus from the Debian packages (built once)."""
    corpus = WORK / "debian_docs.jsonl"
    if corpus.exists():
        return corpus
    debs, tree = WORK / "debs", WORK / "tree"
    debs.mkdir(parents=True, exist_ok=True)
    log(f"apt-get download {len(PACKAGES)} packages")
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, check=True, capture_output=True)
    for deb in sorted(debs.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    docs = size = 0
    tmp = corpus.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
            if path.name.endswith(SKIP):
                continue
            data = path.read_bytes()
            if path.suffix == ".gz":
                try:
                    data = gzip.decompress(data)
                except (OSError, EOFError):
                    continue
            if b"\x00" in data:
                continue
            try:
                text = data.decode()
            except UnicodeDecodeError:
                continue
            if ".htm" in path.name:
                text = TAG.sub("", text)
            rel = path.relative_to(tree)
            for k, doc in enumerate(text.split("\n%\n") if "games/fortunes" in str(rel) else [text]):
                if doc.strip():
                    line = orjson.dumps({"id": f"{rel}#{k}", "text": doc}) + b"\n"
                    out.write(line)
                    docs, size = docs + 1, size + len(line)
    tmp.rename(corpus)
    log(f"corpus: {docs:,} documents, {size / 1e6:.1f} MB")
    return corpus


def small_corpus(corpus: Path) -> Path:
    """Every tenth document of the corpus (same mix), for the memory comparison."""
    small = WORK / "debian_docs_tenth.jsonl"
    if not small.exists():
        with open(corpus, "rb") as f, open(small, "wb") as out:
            for k, line in enumerate(f):
                if k % 10 == 0:
                    out.write(line)
    return small


def train_model(corpus: Path) -> Path:
    prefix = WORK / "bpe_32000"
    if not prefix.with_suffix(".model").exists():
        cmd = harness.cli("train-tokenizer", corpus, "--model-prefix", prefix, "--vocab-size", 32000)
        harness.run_child([*cmd, "--model-type", "bpe", "--max-sentences", "200000"], cwd=harness.ROOT)
    return prefix.with_suffix(".model")


def tokenize_cli(shard: Path, model: Path, prefix: Path, workers: int, *extra: str) -> Measured:
    return bench_tokenize.tokenize_cli(shard, model, prefix, workers, *extra, eod=EOD)


def gigatoken_encode(model: Path, batches: list[list[str]], workers: int) -> Measured:
    """gigatoken's batched encode (``from_sentencepiece``) of texts already in memory, on its thread pool."""
    os.environ.setdefault("RAYON_NUM_THREADS", str(workers))  # read when the pool starts
    import gigatoken

    tokenizer = gigatoken.Tokenizer.from_sentencepiece(model)
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        tokenizer.encode_batch(batch, parallel=workers > 1)
    return Measured(time.perf_counter() - start, time.process_time() - cpu)


def gigatoken_differences(model: Path, batches: list[list[str]]) -> int:
    """Documents whose gigatoken ids (in memory) are not ``sp.encode``'s."""
    import gigatoken
    import sentencepiece as spm

    tokenizer = gigatoken.Tokenizer.from_sentencepiece(model)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    pairs = (zip(tokenizer.encode_batch_list(b), sp.encode(b), strict=True) for b in batches)
    return sum(a != b for batch in pairs for a, b in batch)


def check_identity(prefix: Path, model: Path, batches: list[list[str]], workers: int) -> dict[str, Any]:
    """Compare every document of ``prefix`` with ``sp.encode(text) + [EOD]``."""
    import sentencepiece as spm

    from workflow_scripts.core.indexed_dataset import IndexedDataset

    sp = spm.SentencePieceProcessor(model_file=str(model))
    eod = sp.piece_to_id(EOD)
    ds = IndexedDataset(str(prefix) + "_text_document")
    doc = mismatches = 0
    for batch in batches:
        for ids in sp.encode(batch, num_threads=workers, out_type="numpy"):
            if doc >= ds.num_documents or not np.array_equal(ds.document(doc), np.append(ids, eod)):
                mismatches += 1
            doc += 1
    return {"documents": doc, "stored": ds.num_documents, "mismatches": mismatches}


def profile(model: Path, batches: list[list[str]], mb: float) -> list[dict[str, Any]]:
    """cProfile of the fast encoder in this process over about ``mb`` MB: the top functions by own time."""
    from workflow_scripts.tokens.engines import sp_memo
    from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer

    plan, _ = sp_memo.plan(SentencePieceTokenizer(model).model)
    assert plan is not None
    encoder = sp_memo.SpUnits(plan, 1, 1_000_000, 64)
    take = max(1, int(mb / BATCH_MB))
    prof = cProfile.Profile()
    prof.enable()
    for batch in batches[:take]:
        encoder.encode(batch)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, name), (_, calls, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(file).name}:{line}:{name}", "calls": calls, "own_s": tottime})
    rows.sort(key=lambda r: -r["own_s"])
    for r in rows:
        r["share"] = round(r["own_s"] / total, 3)
        r["own_s"] = round(r["own_s"], 3)
    return rows[:12]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-megatron", action="store_true", help="skip Megatron-LM's preprocess_data.py")
    parser.add_argument("--no-plain", action="store_true", help="skip the CLI with the fast path off")
    parser.add_argument(
        "--megatron-git",
        default=bench_tokenize.MEGATRON_GIT,
        help="Megatron-LM git dir [$SNAKEPACK_MEGATRON_GIT]",
    )
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus()
    model = train_model(corpus)
    batches, input_bytes = bench_tokenize.load_batches(corpus)
    mb = input_bytes / 1e6
    res: dict[str, Any] = {
        "corpus": {"packages": PACKAGES, "mb": round(mb, 1), "documents": sum(map(len, batches))},
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "model": "BPE 32000, the workflow's trainer (identity, whitespace kept, byte fallback)",
    }
    out = WORK / "out"
    steps = {
        "encode_int": lambda: bench_tokenize.encode_only(model, batches, args.workers, int),
        "encode_numpy": lambda: bench_tokenize.encode_only(model, batches, args.workers, "numpy"),
        "gigatoken": lambda: gigatoken_encode(model, batches, args.workers),
        "cli_fast": lambda: tokenize_cli(corpus, model, out / "fast", args.workers),
        "cli_memo": lambda: tokenize_cli(corpus, model, out / "memo", args.workers, "--engine", "memo"),
    }
    runs: dict[str, list[Measured]] = {name: [] for name in steps}
    for r, name in harness.rounds(list(steps), args.repeats, rotate=True):
        m = steps[name]()
        runs[name].append(m)
        log(f"round {r + 1}: {name} {m.wall:.2f}s wall {m.cpu:.2f}s cpu")
    if not args.no_plain:
        runs["cli_plain"] = [tokenize_cli(corpus, model, out / "plain", args.workers, "--no-fast-encode")]
        log(f"cli_plain {runs['cli_plain'][0].wall:.2f}s wall")
    best = harness.best({k: [m.wall for m in v] for k, v in runs.items()})
    for k, v in runs.items():
        res[k] = {
            "best_s": round(best[k], 2),
            "best_mb_s": round(mb / best[k], 2),
            "cpu_s": round(min(m.cpu for m in v), 2),
        }
    for base in ("encode_int", "encode_numpy", "gigatoken"):
        for cli in ("cli_fast", "cli_memo"):
            harness.compare(f"tokenize CLI {cli[4:]} (best)", mb / best[cli], base, mb / best[base])
            res[f"ratio_{cli[4:]}_vs_{base}"] = round(best[base] / best[cli], 3)
            res[f"cpu_ratio_{cli[4:]}_vs_{base}"] = round(res[base]["cpu_s"] / res[cli]["cpu_s"], 3)
        if "cli_plain" in best:
            res[f"ratio_plain_vs_{base}"] = round(best[base] / best["cli_plain"], 3)
    for name in ("fast", "memo"):
        res[f"fast_encode_{name}"] = orjson.loads((out / f"{name}_text_document.stats.json").read_bytes())[
            "fast_encode"
        ]
    fast, memo = res["fast_encode_fast"], res["fast_encode_memo"]
    log(f"engine {fast['engine']}: {fast.get('routed_to_sentencepiece', 0):,} documents to SentencePiece")
    log(f"unit memo: hit rate {memo['hit_rate']:.1%}, {memo['memo_entries']:,} entries")
    res["identity"] = check_identity(out / "fast", model, batches, args.workers)
    log(f"identity: {res['identity']}")
    res["gigatoken_in_memory_differences"] = gigatoken_differences(model, batches)
    log(f"gigatoken alone differs from sp.encode on {res['gigatoken_in_memory_differences']} documents")

    def identical(a: str, b: str) -> bool:
        paths = [[f"{out / n}_text_document{ext}" for n in (a, b)] for ext in (".bin", ".idx")]
        return all(Path(x).read_bytes() == Path(y).read_bytes() for x, y in paths)

    res["identical_to_memo"] = identical("fast", "memo")
    if "cli_plain" in runs:
        res["identical_to_plain"] = identical("fast", "plain")
    res["peak_rss_mb"] = {
        "tenth": int(tokenize_cli(small_corpus(corpus), model, out / "tenth", args.workers).rss_mib),
        "all": int(max(m.rss_mib for m in runs["cli_fast"])),
    }
    if args.no_megatron or not args.megatron_git:
        why = "--no-megatron" if args.no_megatron else "SNAKEPACK_MEGATRON_GIT unset"
        log(f"Megatron-LM SKIPPED: {why}")
        res["megatron"] = f"skipped: {why}"
    else:
        python, src = bench_tokenize.megatron_env(args.megatron_git)
        (bench_tokenize.WORK / "out").mkdir(parents=True, exist_ok=True)  # where it writes
        meg, meg_prefix = bench_tokenize.megatron_preprocess(python, src, corpus, model, args.workers)
        harness.compare(
            "tokenize CLI fast (best)", mb / best["cli_fast"], "Megatron preprocess_data", mb / meg.wall
        )
        res["megatron"] = {"wall_s": round(meg.wall, 2), "mb_s": round(mb / meg.wall, 2)}
        res["ratio_fast_vs_megatron"] = round(meg.wall / best["cli_fast"], 2)
        res["identical_to_megatron"] = all(
            Path(f"{out / 'fast'}_text_document{ext}").read_bytes() == Path(meg_prefix + ext).read_bytes()
            for ext in (".bin", ".idx")
        )
    res["profile_40mb_one_thread"] = profile(model, batches, 40)
    print(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode())
    harness.write_results("tokenize_fast", {"args": vars(args), **res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
