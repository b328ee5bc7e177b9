"""Benchmark byte-level BPE tokenization: the tokenize CLI end to end against the ``tokenizers`` library's
``encode_batch``, gigatoken's ``encode_batch`` and fastokens' ``encode_batch_flat`` (texts in memory) and
Megatron-LM's ``preprocess_data.py``, with the same tokenizer and threads.

    .venv/bin/python bench/bench_tokenize_bpe.py [--workers 2] [--repeats 2] [--vocab 50000] [--no-megatron]

1. Corpus: bench_tokenize_fast's Debian documentation in 20 languages (at least 200 MB of jsonl).
2. A byte-level BPE of ``--vocab`` tokens trained here with the ``tokenizers`` library on 40 MB of it:
   Llama 3's split pattern, a template BOS ``<|begin_of_text|>``, ``eos_token`` ``<|end_of_text|>``.
3. Interleaved rounds (best of ``--repeats``; ``--workers`` threads; the CLI's 4 MB batches), each in a
   fresh process of its own, as a CLI run is (the texts loaded and the tokenizer built before the clock
   starts): ``tokenizers`` ``encode_batch_fast`` (template BOS added), gigatoken ``encode_batch``, gigatoken
   ``encode_files`` reading the jsonl itself in Rust (nothing checked, nothing written: what any tokenizer
   built on gigatoken needs at least), fastokens ``encode_batch_flat``, and the CLI from jsonl to
   ``.bin/.idx`` (EOD appended): with its default engine (fastokens where exact), with ``--engine
   gigatoken`` and with ``--engine memo`` (the unit memo over the ``tokenizers`` library, what a tokenizer
   neither engine serves gets); their files must equal the default's. gigatoken and fastokens then encode
   the same strings again in their process with a fresh tokenizer (``*_again``, three quarters to four
   fifths of the time: CPython keeps a string's UTF-8 once an engine has asked for it, so the second
   encode skips the conversion, which the first does under the GIL), and then fresh copies of them
   (``*_copies``: as long as the first, or longer). Before 2026-11-26 the benchmark gave the second
   figure, measured inside its own process.
4. Megatron-LM ``tools/preprocess_data.py --tokenizer-type HuggingFaceTokenizer --workers N`` from the pinned
   sources of ``../shared/trainers``: its bytes must equal ours (every document's ids); and its
   ``tools/preprocess_data_fast.py --use-gigatoken`` (gigatoken reading the jsonl, ``--workers`` threads):
   every document's ids must be ours after the template's BOS, which it leaves out. Without it
   (``--no-megatron``), every document is checked against ``tokenizers``' ids instead.

Results are printed and written to bench/results/tokenize_bpe.json (``tokenize_bpe_workersN.json`` with
another ``--workers N``).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's workflow_scripts, first

import bench_tokenize
import bench_tokenize_fast
import harness
import numpy as np
import orjson
from harness import Measured

from workflow_scripts.tokens.engines.byte_memo import LLAMA3_SPLIT

WORK = harness.WORK / "tokenize_bpe"
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]


def log(msg: str) -> None:
    print(f"[bench_tokenize_bpe] {msg}", flush=True)


def train_bpe(batches: list[list[str]], vocab: int) -> Path:
    """The benchmark's Llama-3-style byte-level BPE (trained once, on a seeded 40 MB sample)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    folder = WORK / f"bpe_{vocab}"
    if (folder / "tokenizer.json").exists():
        return folder / "tokenizer.json"
    texts = [t for batch in batches for t in batch]
    sample = random.Random(0).sample(texts, len(texts))
    size, cut = 0, 0
    while size < 40e6 and cut < len(sample):
        size, cut = size + len(sample[cut]), cut + 1
    tok = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(sample[:cut], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIALS[0]} $A", special_tokens=[(SPECIALS[0], tok.token_to_id(SPECIALS[0]))]
    )
    folder.mkdir(parents=True, exist_ok=True)
    data = orjson.loads(tok.to_str())
    data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]  # tokenizers 0.15 reads them
    data["model"].pop("ignore_merges", None)
    (folder / "tokenizer.json").write_bytes(orjson.dumps(data))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIALS[0]}
    config["eos_token"] = SPECIALS[1]
    (folder / "tokenizer_config.json").write_bytes(orjson.dumps(config))
    return folder / "tokenizer.json"


def library_encode(model: Path, batches: list[list[str]]) -> Measured:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model))
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        tok.encode_batch_fast(batch, add_special_tokens=True)
    return Measured(time.perf_counter() - start, time.process_time() - cpu)


def gigatoken_encode(model: Path, batches: list[list[str]]) -> Measured:
    import gigatoken

    tok = gigatoken.Tokenizer(str(model))
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        tok.encode_batch(batch)
    return Measured(time.perf_counter() - start, time.process_time() - cpu)


def fastokens_encode(model: Path, batches: list[list[str]]) -> Measured:
    import fastokens

    tok = fastokens.Tokenizer.from_file(str(model))
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        tok.encode_batch_flat(batch)
    return Measured(time.perf_counter() - start, time.process_time() - cpu)


def gigatoken_files(model: Path, corpus: Path) -> Measured:
    import gigatoken

    tok = gigatoken.Tokenizer(str(model))
    start, cpu = time.perf_counter(), time.process_time()
    tok.encode_files(gigatoken.JsonlFileSource([str(corpus)], field="text"))
    return Measured(time.perf_counter() - start, time.process_time() - cpu)


IN_MEMORY = {  # step: how it encodes, and whether it encodes again in its process (``*_again``, ``*_copies``)
    "tokenizers_encode_batch": (library_encode, False),
    "gigatoken_encode_batch": (gigatoken_encode, True),
    "gigatoken_encode_files": (gigatoken_files, False),
    "fastokens_encode_batch": (fastokens_encode, True),
}


def in_memory(step: str, model: Path, corpus: Path, workers: int) -> list[Measured]:
    """A library's encode (``IN_MEMORY``) on ``workers`` threads in a fresh process of its own, as the CLI
    runs (the texts loaded and the tokenizer built before the clock starts); for some, also a second encode
    of the same strings with another fresh tokenizer in that process (their UTF-8 is then cached by
    CPython, which the strings of a CLI run never are), and a third of fresh copies of them."""
    cmd = [sys.executable, __file__, "--in-memory", step, "--model", str(model), "--corpus", str(corpus)]
    cmd += ["--workers", str(workers)]  # the child sizes the pools from it
    runs = orjson.loads(harness.run_child(cmd).output.strip().splitlines()[-1])
    return [Measured(r["wall"], r["cpu"]) for r in runs]


def child(step: str, model: Path, corpus: Path) -> int:
    """(child mode) Print ``in_memory``'s runs of ``step`` as JSON."""
    encode, again = IN_MEMORY[step]
    data = corpus if step == "gigatoken_encode_files" else bench_tokenize.load_batches(corpus)[0]
    runs = [encode(model, data) for _ in range(1 + again)]
    if again:
        runs.append(encode(model, [[t.encode().decode() for t in batch] for batch in data]))
    print(orjson.dumps([{"wall": m.wall, "cpu": m.cpu} for m in runs]).decode())
    return 0


def cli(corpus: Path, model: Path, prefix: Path, workers: int, engine: str = "auto") -> Measured:
    cmd = harness.cli("tokenize", "--input", corpus, "--output-prefix", prefix, "--tokenizer-model", model)
    cmd += ["--append-eod", "--workers", str(workers), "--batch-mb", str(bench_tokenize.BATCH_MB)]
    cmd += ["--engine", engine]
    return harness.run_child(cmd, sample_rss=True, cwd=harness.ROOT)


def megatron(corpus: Path, model: Path, workers: int) -> tuple[Measured, Path]:
    from tests.trainers import trainers

    prefix = WORK / "megatron"
    args = ["tools/preprocess_data.py", "--input", str(corpus), "--output-prefix", str(prefix)]
    args += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(model.parent)]
    args += ["--json-keys", "text", "--append-eod", "--workers", str(workers)]
    start = time.perf_counter()
    out = trainers().run("megatron", args)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return Measured(time.perf_counter() - start, 0.0), Path(f"{prefix}_text_document")


def megatron_fast(corpus: Path, model: Path) -> tuple[Measured, float, Path]:
    """Megatron-LM's ``tools/preprocess_data_fast.py --use-gigatoken`` (gigatoken's ``encode_files``, no
    post-processor tokens): the tool's wall time, its own elapsed time (after its imports) and its prefix."""
    from tests.trainers import trainers

    prefix = WORK / "megatron_fast"
    args = ["tools/preprocess_data_fast.py", "--input", str(corpus), "--output-prefix", str(prefix)]
    args += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(model.parent)]
    args += ["--json-keys", "text", "--append-eod", "--use-gigatoken"]
    start = time.perf_counter()
    out = trainers().run("megatron", args)
    wall = time.perf_counter() - start
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    elapsed = float(re.search(r"Elapsed time: ([0-9.]+)", out.stdout + out.stderr).group(1))
    return Measured(wall, 0.0), elapsed, Path(f"{prefix}_text_document")


def same_but_bos(ours: str, theirs: str) -> dict[str, int]:
    """Documents of ``ours`` whose ids after the template's BOS are ``theirs``' (which have none)."""
    from workflow_scripts.core.indexed_dataset import IndexedDataset

    a, b = IndexedDataset(ours), IndexedDataset(theirs)
    same = sum(len(a[d]) and np.array_equal(a[d][1:], b[d]) for d in range(min(len(a), len(b))))
    return {"documents": len(a), "theirs": len(b), "same_after_our_bos": int(same)}


def library_identity(prefix: Path, model: Path, batches: list[list[str]]) -> dict[str, int]:
    """Every document of ``prefix`` against ``tokenizers``' ids + EOD."""
    from tokenizers import Tokenizer

    from workflow_scripts.core.indexed_dataset import IndexedDataset

    tok = Tokenizer.from_file(str(model))
    eod = tok.token_to_id(SPECIALS[1])
    ds = IndexedDataset(str(prefix) + "_text_document")
    doc = mismatches = 0
    for batch in batches:
        for e in tok.encode_batch_fast(batch, add_special_tokens=True):
            mismatches += doc >= ds.num_documents or not np.array_equal(ds.document(doc), [*e.ids, eod])
            doc += 1
    return {"documents": doc, "stored": ds.num_documents, "mismatches": mismatches}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=50000)
    parser.add_argument("--no-megatron", action="store_true", help="skip Megatron-LM's preprocess_data.py")
    parser.add_argument("--in-memory", choices=IN_MEMORY, help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.workers)  # tokenizers and gigatoken size their pools from it
    os.environ["FASTOKENS_BPE_THREADS"] = str(args.workers)  # fastokens', read at its first encode
    if args.in_memory:
        return child(args.in_memory, args.model, args.corpus)
    WORK.mkdir(parents=True, exist_ok=True)
    corpus = bench_tokenize_fast.make_corpus()
    batches, input_bytes = bench_tokenize.load_batches(corpus)
    mb = input_bytes / 1e6
    model = train_bpe(batches, args.vocab)
    res: dict[str, Any] = {
        "corpus": {"mb": round(mb, 1), "documents": sum(map(len, batches))},
        "workers": args.workers,
        "tokenizer": f"byte-level BPE {args.vocab}, Llama 3's split, template BOS (trained here)",
    }
    out = WORK / "out"
    out.mkdir(exist_ok=True)
    steps: dict[str, Any] = {
        name: functools.partial(in_memory, name, model, corpus, args.workers) for name in IN_MEMORY
    }
    steps |= {
        "cli": lambda: [cli(corpus, model, out / "ours", args.workers)],
        "cli_gigatoken": lambda: [cli(corpus, model, out / "gigatoken", args.workers, "gigatoken")],
        "cli_memo": lambda: [cli(corpus, model, out / "memo", args.workers, "memo")],
    }
    runs: dict[str, list[Measured]] = {name: [] for name in steps}
    for r, name in harness.rounds(list(steps), args.repeats, rotate=True):
        first, *more = steps[name]()
        runs[name].append(first)
        log(f"round {r + 1}: {name} {first.wall:.2f}s wall {first.cpu:.2f}s cpu")
        for what, m in zip(("again", "copies"), more, strict=False):
            runs.setdefault(f"{name}_{what}", []).append(m)
            log(f"round {r + 1}: {name} {what} in its process {m.wall:.2f}s wall {m.cpu:.2f}s cpu")
    best = harness.best({k: [m.wall for m in v] for k, v in runs.items()})
    for k in runs:
        res[k] = {"best_s": round(best[k], 2), "best_mb_s": round(mb / best[k], 2)}
    for base in (
        "gigatoken_encode_batch",
        "gigatoken_encode_batch_again",
        "fastokens_encode_batch",
        "fastokens_encode_batch_again",
        "gigatoken_encode_files",
    ):
        harness.compare("tokenize CLI end to end (best)", mb / best["cli"], base, mb / best[base])
        res[f"ratio_cli_vs_{base}"] = round(best[base] / best["cli"], 3)
    base = "tokenizers_encode_batch"
    harness.compare("tokenize CLI end to end (best)", mb / best["cli"], base, mb / best[base])
    res[f"ratio_cli_vs_{base}"] = round(best[base] / best["cli"], 3)
    for name, base in (
        ("fastokens_encode_batch", "gigatoken_encode_batch"),
        ("gigatoken_encode_files", "gigatoken_encode_batch"),
        ("cli_gigatoken", "gigatoken_encode_batch"),
        ("cli", "cli_gigatoken"),
        ("cli_memo", "tokenizers_encode_batch"),
    ):
        harness.compare(name, mb / best[name], base, mb / best[base])
        res[f"ratio_{name}_vs_{base}"] = round(best[base] / best[name], 3)
    stats = orjson.loads((out / "ours_text_document.stats.json").read_bytes())
    res["fast_encode"] = stats["fast_encode"]
    res["gigatoken_engine"] = orjson.loads((out / "gigatoken_text_document.stats.json").read_bytes())[
        "fast_encode"
    ]["engine"]
    res["memo"] = orjson.loads((out / "memo_text_document.stats.json").read_bytes())["fast_encode"]["memo"]
    res["same_files_as_cli"] = {
        other: all(
            (out / f"{other}_text_document{e}").read_bytes() == (out / f"ours_text_document{e}").read_bytes()
            for e in (".bin", ".idx")
        )
        for other in ("gigatoken", "memo")
    }
    res["peak_rss_mb"] = int(max(m.rss_mib for m in runs["cli"]))
    log(f"engine: {stats['fast_encode']}")
    if args.no_megatron:
        res["identity"] = library_identity(out / "ours", model, batches)
        res["megatron"] = "skipped: --no-megatron"
    else:
        meg, theirs = megatron(corpus, model, args.workers)
        harness.compare("tokenize CLI (best)", mb / best["cli"], "Megatron preprocess_data", mb / meg.wall)
        ours = f"{out / 'ours'}_text_document"
        same = all(Path(ours + e).read_bytes() == Path(f"{theirs}{e}").read_bytes() for e in (".bin", ".idx"))
        res["megatron"] = {"wall_s": round(meg.wall, 2), "mb_s": round(mb / meg.wall, 2), "identical": same}
        res["ratio_cli_vs_megatron"] = round(meg.wall / best["cli"], 3)
        fast, elapsed, theirs_fast = megatron_fast(corpus, model)
        harness.compare(
            "tokenize CLI (best)", mb / best["cli"], "Megatron preprocess_data_fast", mb / fast.wall
        )
        res["megatron_fast"] = {
            "wall_s": round(fast.wall, 2),
            "elapsed_s": round(elapsed, 2),  # its own figure, after its imports (torch)
            "mb_s": round(mb / fast.wall, 2),
            **same_but_bos(ours, str(theirs_fast)),
        }
        res["ratio_cli_vs_megatron_fast"] = round(fast.wall / best["cli"], 3)
    log(f"identity: {res.get('identity') or res['megatron']}")
    harness.write_results("tokenize_bpe" + ("" if args.workers == 2 else f"_workers{args.workers}"), res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
