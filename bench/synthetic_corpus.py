"""A second tokenize corpus, independent of the Debian one: generated text in eight scripts and a
Llama-2-style SentencePiece model trained on it (bench_tokenize_fast.py ``--corpus synthetic``).

Each language is a seeded vocabulary of made-up words (syllables of its script's letters, from Python's
Unicode tables) drawn by a Zipf law, in sentences with its own punctuation, digits and some Latin words;
Chinese and Japanese write no spaces between words. A document is one language (a few are mixed), of
log-normal length. Everything is drawn from one seeded generator: the same arguments give the same bytes.
The model is BPE with Llama 2's options (identity normalization, whitespace kept, dummy prefix, digits split,
byte fallback), trained with SentencePiece's own trainer on a sample of the corpus's lines.
"""

from __future__ import annotations

import itertools
import math
import random
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import orjson

LANGUAGES = {  # name: (letter ranges, letters a word, writes spaces, sentence end, comma)
    "latin": ([(0x61, 0x7A), (0xE0, 0xFF)], (2, 10), True, ".", ","),
    "cyrillic": ([(0x430, 0x44F)], (2, 10), True, ".", ","),
    "greek": ([(0x3B1, 0x3C9)], (2, 10), True, ".", ","),
    "arabic": ([(0x628, 0x64A)], (2, 7), True, ".", "\u060c"),
    "devanagari": ([(0x915, 0x939)], (1, 4), True, "\u0964", ","),
    "hangul": ([(0xAC00, 0xD7A3)], (1, 3), True, ".", ","),
    "chinese": ([(0x4E00, 0x9FFF)], (1, 2), False, "\u3002", "\uff0c"),
    "japanese": ([(0x3041, 0x3096), (0x30A1, 0x30FA), (0x4E00, 0x9FFF)], (1, 4), False, "\u3002", "\u3001"),
}
VOWEL_SIGNS = {"devanagari": [chr(c) for c in range(0x93E, 0x94D)] + [""], "arabic": ["", "", "\u064e"]}
WORDS = 30_000  # a language's vocabulary
SPECIAL = "</s>"  # spelled in a few documents: the engines must keep it text


def letters(ranges: list[tuple[int, int]]) -> list[str]:
    """The letters (Unicode category L*) of the ranges."""
    found = (chr(c) for a, b in ranges for c in range(a, b + 1))
    return [ch for ch in found if unicodedata.category(ch).startswith("L")]


def vocabulary(rng: random.Random, name: str) -> list[str]:
    """The language's words, most frequent first."""
    ranges, (low, high), *_ = LANGUAGES[name]
    alphabet = letters(ranges)[:3000]  # the common end of the CJK block
    signs = VOWEL_SIGNS.get(name, [""])
    words: dict[str, None] = {}
    while len(words) < WORDS:
        words["".join(rng.choice(alphabet) + rng.choice(signs) for _ in range(rng.randint(low, high)))] = None
    return list(words)


def zipf_weights(n: int) -> list[float]:
    """Cumulative Zipf weights (exponent 1.1) of ``n`` ranks."""
    return list(itertools.accumulate(1 / (k + 1) ** 1.1 for k in range(n)))


def sentence(rng: random.Random, name: str, words: list[str], cum: list[float], latin: list[str]) -> str:
    """One sentence of the language: Zipf-drawn words, a comma now and then, a number or a Latin word."""
    _, _, spaced, end, comma = LANGUAGES[name]
    out = rng.choices(words, cum_weights=cum, k=rng.randint(4, 24))
    for k in range(len(out)):
        roll = rng.random()
        if roll < 0.04:
            out[k] = str(rng.randint(0, 10 ** rng.randint(1, 6)))
        elif roll < 0.07 and name != "latin":
            out[k] = rng.choice(latin[:2000])
        elif roll > 0.92 and k:
            out[k] += comma
    return (" " if spaced else "").join(out) + end


def documents(seed: int, total_bytes: int) -> Iterator[str]:
    """Documents of about ``total_bytes`` UTF-8 bytes in all."""
    rng = random.Random(seed)
    names = list(LANGUAGES)
    vocab = {name: vocabulary(rng, name) for name in names}
    cum = zipf_weights(WORDS)
    size = 0
    while size < total_bytes:
        langs = [rng.choice(names)] if rng.random() < 0.95 else rng.sample(names, 2)
        target = min(200_000, int(math.exp(rng.gauss(7.5, 1.2))))  # median about 1.8 kB
        paragraphs, length = [], 0
        while length < target:
            lang = rng.choice(langs)
            para = " ".join(
                sentence(rng, lang, vocab[lang], cum, vocab["latin"]) for _ in range(rng.randint(1, 8))
            )
            if rng.random() < 0.0002:
                para += f" {SPECIAL} "
            paragraphs.append(para)
            length += len(para.encode())
        text = "\n\n".join(paragraphs) + "\n"
        size += len(text.encode())
        yield text


def make_corpus(path: Path, mb: float, seed: int = 56) -> Path:
    """The jsonl corpus of about ``mb`` MB at ``path`` (made once)."""
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        for k, text in enumerate(documents(seed, int(mb * 1e6))):
            out.write(orjson.dumps({"id": f"synthetic-{k}", "text": text}) + b"\n")
    tmp.rename(path)
    return path


def train_model(corpus: Path, prefix: Path, vocab_size: int = 32000, lines: int = 300_000) -> Path:
    """A Llama-2-style BPE model (``prefix.model``, made once) trained by SentencePiece on the first
    ``lines`` lines of every tenth document."""
    import sentencepiece as spm

    model = prefix.with_suffix(".model")
    if model.exists():
        return model
    sample = prefix.with_suffix(".sample.txt")
    with open(corpus, "rb") as f, open(sample, "w") as out:
        kept = 0
        for k, raw in enumerate(f):
            if k % 10 or kept >= lines:
                continue
            for line in orjson.loads(raw)["text"].splitlines():
                if line.strip() and kept < lines:
                    out.write(line[:4000] + "\n")
                    kept += 1
    spm.SentencePieceTrainer.train(
        input=str(sample),
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=0.9995,
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        allow_whitespace_only_pieces=True,
        max_sentence_length=16384,
        num_threads=2,
        minloglevel=2,
    )
    return model
