"""Train a tokenizer on a deterministic sample of jsonl shards: SentencePiece (the default) or a byte-level
BPE ``tokenizer.json`` (``--kind hf-bpe``).

Usage::

    snakepack train-tokenizer SHARD.jsonl[.zst|.gz] ... --model-prefix P \\
        [--vocab-size 32000] [--model-type bpe|unigram] [--max-sentences 2000000] [--seed 1234] \\
        [--character-coverage 0.9995] [--control-symbols '<|endoftext|>' '<|user|>' '<|assistant|>'] \\
        [--user-defined-symbols ''] [--threads 1] [--spm-option KEY=VALUE ...]
    snakepack train-tokenizer SHARD.jsonl ... --kind hf-bpe --output-dir D [--vocab-size ...] [...]

writes ``P.model`` and ``P.vocab`` (``piece<TAB>score`` per line) atomically; with ``--kind hf-bpe``,
``D/tokenizer.json`` and ``D/tokenizer_config.json`` (see ``train_byte_level_bpe``).

Sampling: the ``text`` of every readable record is cut into lines (SentencePiece trains on sentences);
a seeded reservoir sample of at most ``--max-sentences`` non-blank lines, in input order of the sorted
shard paths, is the whole training input (SentencePiece's own sampling and shuffling are off). Same shards,
options and seed: same model bytes (``--threads`` above 1 may change them for some model types; 1 is the
default).

The model is lossless for LLM text: ``identity`` normalization, whitespace kept, newlines and rare
characters via ``byte_fallback``, ``hard_vocab_limit`` off so a small corpus still trains (the vocabulary may
then be smaller than asked). The special tokens are ``control_symbols`` by default: they get ids (look them
up with ``piece_to_id``) but raw text never encodes to them, so a web page quoting ``<|endoftext|>`` cannot
forge a document end. ``--user-defined-symbols`` makes pieces that raw text does encode to.

EOS is ``<|endoftext|>`` when it is among the control symbols: ids 0 ``<unk>``, 1 ``<s>``, 2 ``</s>`` (kept
as a control piece), then the control symbols in order, ``<|endoftext|>`` being the model's EOS. Megatron-LM
(EOD = the model's EOS), GPT-NeoX (EOD = ``piece_to_id("<|endoftext|>")``) and the tokenize stage's EOD rule
then all pick the same id.
"""

from __future__ import annotations

import argparse
import io
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import sentencepiece as spm
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from workflow_scripts.core import settings
from workflow_scripts.core.cli import UserError
from workflow_scripts.core.fsio import atomic_path, open_binary
from workflow_scripts.tokens.settings import EOD_PIECE, TokenizerSettings


def iter_texts(paths: Iterable[str], json_key: str = "text") -> Iterator[str]:
    """The string ``json_key`` of every JSON object line of ``paths``; other lines are skipped."""
    for path in paths:
        with open_binary(path) as f:
            for raw in f:
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                text = record.get(json_key) if isinstance(record, dict) else None
                if isinstance(text, str):
                    yield text


def sample_lines(texts: Iterable[str], max_lines: int, seed: int) -> tuple[list[str], int]:
    """Reservoir-sample (algorithm R, seeded) at most ``max_lines`` non-blank lines; also count them all."""
    rng = random.Random(seed)
    sample: list[str] = []
    seen = 0
    for text in texts:
        for line in text.split("\n"):
            if not line.strip():
                continue
            if seen < max_lines:
                sample.append(line)
            else:
                j = rng.randrange(seen + 1)
                if j < max_lines:
                    sample[j] = line
            seen += 1
    return sample, seen


def trainer_options(
    *,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    control_symbols: Sequence[str],
    user_defined_symbols: Sequence[str],
    threads: int,
    extra: dict[str, str],
) -> dict[str, Any]:
    """SentencePiece trainer options (``extra`` overrides, as SentencePiece flag strings)."""
    options: dict[str, Any] = {
        "model_type": model_type,
        "vocab_size": vocab_size,
        "character_coverage": character_coverage,
        "byte_fallback": True,
        "hard_vocab_limit": False,
        "normalization_rule_name": "identity",
        "remove_extra_whitespaces": False,
        "allow_whitespace_only_pieces": True,
        "max_sentence_length": 16384,
        "input_sentence_size": 0,
        "shuffle_input_sentence": False,
        "num_threads": threads,
        "unk_id": 0,
        "bos_id": 1,
        "eos_id": 2,
        "pad_id": -1,
        "minloglevel": 1,
    }
    if EOD_PIECE in control_symbols:
        controls = [p for p in control_symbols if p != EOD_PIECE]
        options |= {"eos_piece": EOD_PIECE, "eos_id": 3 + list(control_symbols).index(EOD_PIECE)}
        options["control_symbols"] = ["</s>", *controls]
    elif control_symbols:
        options["control_symbols"] = list(control_symbols)
    if user_defined_symbols:
        options["user_defined_symbols"] = list(user_defined_symbols)
    options.update(extra)
    return options


def train(sentences: Sequence[str], model_prefix: str, options: dict[str, Any]) -> spm.SentencePieceProcessor:
    """Train on ``sentences``; write ``model_prefix.model`` and ``.vocab`` atomically; return the model."""
    if not sentences:
        raise UserError("no training text: the inputs hold no non-blank text lines")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, **options)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.vocab_size()))
    with atomic_path(model_prefix + ".model") as model_tmp, atomic_path(model_prefix + ".vocab") as vocab_tmp:
        model_tmp.write_bytes(model.getvalue())
        vocab_tmp.write_text(vocab, encoding="utf-8")
    return sp


def train_byte_level_bpe(
    sentences: Sequence[str], out_dir: str, vocab_size: int, control_symbols: Sequence[str]
) -> Tokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer and byte alphabet, no prefix space, no tokens added) trained
    on ``sentences`` with the ``tokenizers`` library; ``<|endoftext|>`` then the other control symbols are
    its first ids, special tokens (GPT-NeoX's ``HFTokenizer`` takes ``<|endoftext|>`` as EOD; the
    ``tokenizer_config.json`` names it ``eos_token`` for Megatron-LM's ``HuggingFaceTokenizer``). Merges are
    written as "a b" strings, which every ``tokenizers`` release reads (GPT-NeoX pins tokenizers 0.15).
    Same sentences and settings: same bytes."""
    if not sentences:
        raise UserError("no training text: the inputs hold no non-blank text lines")
    specials = [EOD_PIECE, *(p for p in control_symbols if p != EOD_PIECE)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sentences, trainer, length=len(sentences))
    data = orjson.loads(tok.to_str())
    data["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    data["model"].pop("ignore_merges", None)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOD_PIECE,
        "clean_up_tokenization_spaces": False,
    }
    os.makedirs(out_dir, exist_ok=True)
    json_path, config_path = (
        os.path.join(out_dir, "tokenizer.json"),
        os.path.join(out_dir, "tokenizer_config.json"),
    )
    with atomic_path(json_path) as json_tmp, atomic_path(config_path) as config_tmp:
        json_tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        config_tmp.write_bytes(orjson.dumps(config, option=orjson.OPT_INDENT_2))
    return Tokenizer.from_file(json_path)


def _key_value(spec: str) -> tuple[str, str]:
    key, sep, value = spec.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {spec!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], fromfile_prefix_chars="@")
    parser.add_argument(
        "inputs", nargs="+", metavar="SHARD", help="jsonl shards (.jsonl, .gz, .zst) or @LIST"
    )
    parser.add_argument("--kind", choices=("sentencepiece", "hf-bpe"), default="sentencepiece")
    parser.add_argument("--model-prefix", help="sentencepiece: writes PREFIX.model and PREFIX.vocab")
    parser.add_argument(
        "--output-dir", help="hf-bpe: writes DIR/tokenizer.json and DIR/tokenizer_config.json"
    )
    settings.add_arguments(parser, TokenizerSettings, "tokenizer settings")
    parser.add_argument("--user-defined-symbols", nargs="*", default=[], help="pieces kept whole in text")
    parser.add_argument("--json-key", default="text")
    parser.add_argument(
        "--threads", type=int, default=1, help="trainer threads (stored in the model; 1 is reproducible)"
    )
    parser.add_argument(
        "--spm-option",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other SentencePiece trainer option (repeat)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.output_dir if args.kind == "hf-bpe" else args.model_prefix):
        parser.error("--kind hf-bpe needs --output-dir; sentencepiece needs --model-prefix")
    opts = settings.from_args(TokenizerSettings, args)
    paths = sorted(os.fspath(p) for p in args.inputs)
    sentences, seen = sample_lines(iter_texts(paths, args.json_key), opts.max_sentences, opts.seed)
    nbytes = sum(len(s.encode()) for s in sentences)
    if args.kind == "hf-bpe":
        tok = train_byte_level_bpe(sentences, args.output_dir, opts.vocab_size, opts.control_symbols)
        print(
            f"trained byte-level BPE {args.output_dir}/tokenizer.json: vocab {tok.get_vocab_size()} "
            f"(asked {opts.vocab_size}) on {len(sentences)} of {seen} lines ({nbytes / 1e6:.1f} MB) "
            f"from {len(paths)} files, seed {opts.seed}"
        )
        return 0
    options = trainer_options(
        vocab_size=opts.vocab_size,
        model_type=opts.model_type,
        character_coverage=opts.character_coverage,
        control_symbols=list(opts.control_symbols),
        user_defined_symbols=args.user_defined_symbols,
        threads=args.threads,
        extra=dict(args.spm_option),
    )
    sp = train(sentences, args.model_prefix, options)
    print(
        f"trained {opts.model_type} tokenizer {args.model_prefix}.model: vocab {sp.vocab_size()} "
        f"(asked {opts.vocab_size}) on {len(sentences)} of {seen} lines ({nbytes / 1e6:.1f} MB) "
        f"from {len(paths)} files, seed {opts.seed}"
    )
    return 0
