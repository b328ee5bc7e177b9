"""Benchmark the tokenize CLI's fast path on two multilingual corpora against SentencePiece's own encode
and gigatoken's.

    .venv/bin/python bench/bench_tokenize_fast.py [--corpus both|debian|synthetic] [--every N] [--workers 2]
        [--repeats 3] [--no-megatron] [--no-plain] [--no-sentencepiece] [--synthetic-mb 200]

Steps, for each corpus (work dir bench/_work/tokenize_fast, git-ignored; corpora and models are reused when
present; ``--every N`` takes every N-th document, the same mix, for shorter runs):

1. Corpora: ``debian``: Debian packages of man pages in many languages, the Debian handbook and reference,
   fortunes, Linux and Python documentation (``PACKAGES``, fetched with ``apt-get download``, unpacked with
   ``dpkg-deb -x``), one document per file (HTML tags stripped), one per fortune: at least 200 MB of jsonl.
   ``synthetic``: ``synthetic_corpus``'s generated text in eight scripts (Latin, Cyrillic, Greek, Arabic,
   Devanagari, Hangul, Chinese, Japanese; seeded, the same bytes every time).
2. Models: for ``debian`` a 32k BPE model trained with the workflow's trainer (identity normalization,
   whitespace kept, byte fallback) on 200,000 sampled lines, EOD ``<|endoftext|>``; for ``synthetic`` a 32k
   Llama-2-style BPE model trained by SentencePiece's ``spm_train`` (byte fallback, split digits), EOD
   ``</s>``.
3. Interleaved rounds (best of ``--repeats``): SentencePiece's batched ``encode`` of the texts already in
   memory, in the CLI's 4 MB batches, with ``--workers`` threads (int lists and numpy output;
   ``--no-sentencepiece`` leaves it out: a tenth of the CLI's speed, it takes most of a run); gigatoken's
   (``from_sentencepiece``, ``encode_batch`` on its thread pool of ``--workers``) of the texts in memory, in a
   fresh process each round (``gigatoken``: its first pass over the corpus, as a CLI run's) and in this
   process (``gigatoken_warm``: after the first round its pretoken caches already hold the corpus's words);
   the tokenize CLI end to end (read jsonl, write .bin/.idx) with ``--workers``, fast path on: its default
   engine (gigatoken where exact) and the unit memo (``--engine memo``); the CLI with the fast path off once
   (``--no-plain`` skips it). Ratio = baseline time / CLI time; the CPU ratio (CPU seconds, all threads)
   is what a busy shared machine shows best.
4. Identity: every document of the CLI's output equals ``sp.encode(text) + [EOD]`` (gigatoken's own
   in-memory ids do not: it reads added pieces spelled in text as control tokens; the count is printed), and
   the two engines' files are identical.
5. Megatron-LM ``tools/preprocess_data.py`` with the same model and workers (``SNAKEPACK_MEGATRON_GIT``,
   see bench_tokenize.py), its bytes compared with ours.
6. Memory: the CLI's peak RSS (process tree) on a tenth of the corpus and on all of it.
7. Profile: cProfile of the unit memo (one SentencePiece thread) over the first 40 MB (where the time
   goes: the compiled memo's ``scan``/``emit``, SentencePiece on the missing units).

Results are printed (last, one line a corpus: the CLI's MB/s, gigatoken's and the ratio) and written to
bench/results/tokenize_fast.json.
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
import synthetic_corpus
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


def train_model(corpus: Path) -> Path:
    prefix = WORK / "bpe_32000"
    if not prefix.with_suffix(".model").exists():
        cmd = harness.cli("train-tokenizer", corpus, "--model-prefix", prefix, "--vocab-size", 32000)
        harness.run_child([*cmd, "--model-type", "bpe", "--max-sentences", "200000"], cwd=harness.ROOT)
    return prefix.with_suffix(".model")


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


def check_identity(
    prefix: Path, model: Path, batches: list[list[str]], workers: int, eod_piece: str
) -> dict[str, Any]:
    """Compare every document of ``prefix`` with ``sp.encode(text) + [EOD]``."""
    import sentencepiece as spm

    from workflow_scripts.core.indexed_dataset import IndexedDataset

    sp = spm.SentencePieceProcessor(model_file=str(model))
    eod = sp.piece_to_id(eod_piece)
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


def gigatoken_child(model: Path, corpus: Path, workers: int) -> Measured:
    """``gigatoken_encode`` in a fresh process (its first pass over the corpus, as a CLI run's): the texts are
    read before the clock starts."""
    cmd = [sys.executable, __file__, "--gigatoken-child", str(model), str(corpus), str(workers)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall, cpu = map(float, out.split())
    return Measured(wall, cpu)


def sampled(corpus: Path, every: int) -> Path:
    """Every ``every``-th document of the corpus (the same mix), made once; the corpus itself for 1."""
    if every == 1:
        return corpus
    part = corpus.with_name(f"{corpus.stem}_every{every}.jsonl")
    if not part.exists():
        with open(corpus, "rb") as f, open(part, "wb") as out:
            out.writelines(line for k, line in enumerate(f) if k % every == 0)
    return part


def corpus_and_model(name: str, synthetic_mb: float) -> tuple[Path, Path, str, str]:
    """The corpus, its model, the model's EOD piece and a line saying what they are."""
    if name == "debian":
        corpus = make_corpus()
        what = "Debian docs, 20 languages; BPE 32000, the workflow's trainer (identity, byte fallback)"
        return corpus, train_model(corpus), EOD, what
    corpus = synthetic_corpus.make_corpus(WORK / "synthetic.jsonl", synthetic_mb)
    model = synthetic_corpus.train_model(corpus, WORK / "llama_like_32000")
    what = "synthetic text in 8 scripts; Llama-2-style BPE 32000 (spm_train: identity, byte fallback, digits)"
    return corpus, model, "</s>", what


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one corpus."""
    full, model, eod, what = corpus_and_model(name, args.synthetic_mb)
    corpus = sampled(full, args.every)
    batches, input_bytes = bench_tokenize.load_batches(corpus)
    mb = input_bytes / 1e6
    log(f"{name}: {corpus.name}, {mb:.1f} MB, {sum(map(len, batches)):,} documents")
    res: dict[str, Any] = {
        "corpus": {
            "name": name,
            "file": corpus.name,
            "mb": round(mb, 1),
            "documents": sum(map(len, batches)),
        },
        "model": what,
    }
    if name == "debian":
        res["corpus"]["packages"] = PACKAGES
    out = WORK / "out" / name

    def cli(prefix: str, *extra: str) -> Measured:
        return bench_tokenize.tokenize_cli(corpus, model, out / prefix, args.workers, *extra, eod=eod)

    steps = {
        "encode_int": lambda: bench_tokenize.encode_only(model, batches, args.workers, int),
        "encode_numpy": lambda: bench_tokenize.encode_only(model, batches, args.workers, "numpy"),
    }
    if args.no_sentencepiece:
        steps = {}
    steps |= {
        "gigatoken": lambda: gigatoken_child(model, corpus, args.workers),
        "gigatoken_warm": lambda: gigatoken_encode(model, batches, args.workers),
        "cli_fast": lambda: cli("fast"),
        "cli_memo": lambda: cli("memo", "--engine", "memo"),
    }
    runs: dict[str, list[Measured]] = {step: [] for step in steps}
    for r, step in harness.rounds(list(steps), args.repeats, rotate=True):
        m = steps[step]()
        runs[step].append(m)
        log(f"{name} round {r + 1}: {step} {m.wall:.2f}s wall {m.cpu:.2f}s cpu")
    if not args.no_plain:
        runs["cli_plain"] = [cli("plain", "--no-fast-encode")]
        log(f"cli_plain {runs['cli_plain'][0].wall:.2f}s wall")
    best = harness.best({k: [m.wall for m in v] for k, v in runs.items()})
    for k, v in runs.items():
        res[k] = {
            "best_s": round(best[k], 2),
            "best_mb_s": round(mb / best[k], 2),
            "cpu_s": round(min(m.cpu for m in v), 2),
        }
    for base in [b for b in ("encode_int", "encode_numpy", "gigatoken", "gigatoken_warm") if b in best]:
        for fast in ("cli_fast", "cli_memo"):
            harness.compare(f"{name}: tokenize CLI {fast[4:]} (best)", mb / best[fast], base, mb / best[base])
            res[f"ratio_{fast[4:]}_vs_{base}"] = round(best[base] / best[fast], 3)
            res[f"cpu_ratio_{fast[4:]}_vs_{base}"] = round(res[base]["cpu_s"] / res[fast]["cpu_s"], 3)
        if "cli_plain" in best:
            res[f"ratio_plain_vs_{base}"] = round(best[base] / best["cli_plain"], 3)
    for engine in ("fast", "memo"):
        stats = orjson.loads((out / f"{engine}_text_document.stats.json").read_bytes())
        res[f"fast_encode_{engine}"] = stats["fast_encode"]
    fast, memo = res["fast_encode_fast"], res["fast_encode_memo"]
    log(f"engine {fast['engine']}: {fast.get('routed_to_sentencepiece', 0):,} documents to SentencePiece")
    log(f"unit memo: hit rate {memo['hit_rate']:.1%}, {memo['memo_entries']:,} entries")
    res["identity"] = check_identity(out / "fast", model, batches, args.workers, eod)
    log(f"identity: {res['identity']}")
    res["gigatoken_in_memory_differences"] = gigatoken_differences(model, batches)
    log(f"gigatoken alone differs from sp.encode on {res['gigatoken_in_memory_differences']} documents")

    def identical(a: str, b: str) -> bool:
        paths = [[f"{out / n}_text_document{ext}" for n in (a, b)] for ext in (".bin", ".idx")]
        return all(Path(x).read_bytes() == Path(y).read_bytes() for x, y in paths)

    res["identical_to_memo"] = identical("fast", "memo")
    if "cli_plain" in runs:
        res["identical_to_plain"] = identical("fast", "plain")
    tenth = bench_tokenize.tokenize_cli(sampled(corpus, 10), model, out / "tenth", args.workers, eod=eod)
    res["peak_rss_mb"] = {"tenth": int(tenth.rss_mib), "all": int(max(m.rss_mib for m in runs["cli_fast"]))}
    if args.no_megatron or not args.megatron_git:
        why = "--no-megatron" if args.no_megatron else "SNAKEPACK_MEGATRON_GIT unset"
        log(f"Megatron-LM SKIPPED: {why}")
        res["megatron"] = f"skipped: {why}"
    else:
        python, src = bench_tokenize.megatron_env(args.megatron_git)
        (bench_tokenize.WORK / "out").mkdir(parents=True, exist_ok=True)  # where it writes
        meg, meg_prefix = bench_tokenize.megatron_preprocess(python, src, corpus, model, args.workers)
        harness.compare(
            f"{name}: tokenize CLI fast (best)",
            mb / best["cli_fast"],
            "Megatron preprocess_data",
            mb / meg.wall,
        )
        res["megatron"] = {"wall_s": round(meg.wall, 2), "mb_s": round(mb / meg.wall, 2)}
        res["ratio_fast_vs_megatron"] = round(meg.wall / best["cli_fast"], 2)
        res["identical_to_megatron"] = all(
            Path(f"{out / 'fast'}_text_document{ext}").read_bytes() == Path(meg_prefix + ext).read_bytes()
            for ext in (".bin", ".idx")
        )
    res["profile_40mb_one_thread"] = profile(model, batches, 40)
    return res


def main() -> int:
    if sys.argv[1:2] == ["--gigatoken-child"]:
        model, corpus, workers = Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
        m = gigatoken_encode(model, bench_tokenize.load_batches(corpus)[0], workers)
        print(m.wall, m.cpu)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=("debian", "synthetic", "both"), default="both")
    parser.add_argument(
        "--every", type=int, default=1, help="take every N-th document (the same mix, faster)"
    )
    parser.add_argument("--synthetic-mb", type=float, default=200.0, help="size of the synthetic corpus")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-megatron", action="store_true", help="skip Megatron-LM's preprocess_data.py")
    parser.add_argument("--no-plain", action="store_true", help="skip the CLI with the fast path off")
    parser.add_argument(
        "--no-sentencepiece", action="store_true", help="skip SentencePiece's own encode (the slow baseline)"
    )
    parser.add_argument(
        "--megatron-git",
        default=bench_tokenize.MEGATRON_GIT,
        help="Megatron-LM git dir [$SNAKEPACK_MEGATRON_GIT]",
    )
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    names = ["debian", "synthetic"] if args.corpus == "both" else [args.corpus]
    res: dict[str, Any] = {"workers": args.workers, "cpus": os.cpu_count()}
    for name in names:
        res[name] = measure(name, args)
    for name in names:
        r = res[name]
        log(
            f"{name}: CLI {r['cli_fast']['best_mb_s']} MB/s, "
            f"gigatoken in memory {r['gigatoken']['best_mb_s']} MB/s "
            f"(fresh process; {r['gigatoken_warm']['best_mb_s']} warm): {r['ratio_fast_vs_gigatoken']}x "
            f"({r['ratio_fast_vs_gigatoken_warm']}x warm), identity {r['identity']['mismatches']} mismatches"
        )
    print(orjson.dumps(res, option=orjson.OPT_INDENT_2).decode())
    harness.write_results("tokenize_fast", {"args": vars(args), **res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
