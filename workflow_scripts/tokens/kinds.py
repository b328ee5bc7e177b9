"""Which tokenizer a config or command names: its kind and its files, read cheaply (no tokenizer loaded).

Kinds (``tokenizer.type``; ``auto`` reads it from the file):

- ``sentencepiece``: a SentencePiece ``.model`` (a protobuf: anything not JSON);
- ``hf``: a Hugging Face ``tokenizer.json`` (a JSON object with a ``model``);
- ``gpt2``: a GPT-2 ``vocab.json`` (a JSON object of token -> id) with its ``merges.txt``:
  ``tokenizer.merges``, else the file beside it named as the vocabulary with ``vocab.json`` -> ``merges.txt``
  (``gpt2-vocab.json`` -> ``gpt2-merges.txt``).

Commands take ``--tokenizer-model`` (and ``--tokenizer-merges``, ``--tokenizer-type`` when the config sets
them): ``add_arguments`` and ``from_args``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from workflow_scripts.core.cli import UserError

if TYPE_CHECKING:  # not at run time: the rules read this module (no numpy, no tokenizer library)
    from workflow_scripts.tokens.engines.base import Tokenizer

KINDS = ("sentencepiece", "hf", "gpt2")


class TokenizerKindError(UserError, ValueError):
    """Tokenizer files whose kind cannot be told or that do not go together."""


@functools.lru_cache(maxsize=8)
def detect(path: str) -> str:
    """The kind of the tokenizer file ``path`` (see the module docstring)."""
    try:
        with open(path, "rb") as f:
            if f.read(1) != b"{":
                return "sentencepiece"
        with open(path, "rb") as f:
            data = orjson.loads(f.read())
    except (ValueError, UnicodeDecodeError):
        return "sentencepiece"
    except OSError as exc:
        raise TokenizerKindError(f"{path}: cannot read the tokenizer: {exc.strerror}") from None
    if isinstance(data, dict) and "model" in data:
        return "hf"
    if isinstance(data, dict) and data and all(isinstance(v, int) for v in data.values()):
        return "gpt2"
    raise TokenizerKindError(
        f"{path}: a JSON file that is neither a Hugging Face tokenizer.json (no 'model') nor a GPT-2 "
        "vocab.json (token -> id)"
    )


def merges_beside(vocab: str) -> str:
    """The GPT-2 merges file named after ``vocab``: ``...vocab.json`` -> ``...merges.txt``."""
    head, name = os.path.split(vocab)
    if "vocab" not in name:
        raise TokenizerKindError(
            f"{vocab}: a GPT-2 vocabulary whose merges file cannot be named from it; set tokenizer.merges"
        )
    before, _, after = name.removesuffix(".json").rpartition("vocab")
    return os.path.join(head, f"{before}merges{after}.txt")


@dataclass(frozen=True)
class TokenizerFiles:
    """A tokenizer's kind and files: ``model`` (the SentencePiece model, tokenizer.json or vocab.json) and,
    for ``gpt2``, ``merges``."""

    kind: str
    model: str
    merges: str | None = None

    @classmethod
    def resolve(cls, model: str, kind: str = "auto", merges: str | None = None) -> TokenizerFiles:
        """The files a config names (``kind`` auto: from the file; ``merges`` only for gpt2)."""
        if kind not in ("auto", *KINDS):
            raise TokenizerKindError(f"tokenizer type {kind!r}: expected auto or one of {', '.join(KINDS)}")
        if kind == "auto":
            kind = "gpt2" if merges else detect(model)
        if kind != "gpt2":
            if merges:
                raise TokenizerKindError(f"{merges}: a merges file goes with a GPT-2 vocab.json, not {kind}")
            return cls(kind, model)
        return cls(kind, model, merges or merges_beside(model))

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> TokenizerFiles:
        """The files of a loaded tokenizer."""
        return cls(tokenizer.kind, tokenizer.path, tokenizer.merges)

    @property
    def paths(self) -> list[str]:
        """Every file of the tokenizer (a rule's inputs)."""
        return [self.model] + ([self.merges] if self.merges else [])

    def sha256(self) -> str:
        """The tokenizer's identity: the file's digest; for two files, the digest of their digests."""
        digests = []
        for path in self.paths:
            with open(path, "rb") as f:
                digests.append(hashlib.file_digest(f, "sha256").hexdigest())
        return digests[0] if len(digests) == 1 else hashlib.sha256(" ".join(digests).encode()).hexdigest()

    def load(self) -> Tokenizer:
        """The tokenizer, ready to encode (``engines.choose`` picks its encoder)."""
        if self.kind == "sentencepiece":
            from workflow_scripts.tokens.engines.sp_tokenizer import SentencePieceTokenizer

            return SentencePieceTokenizer(self.model)
        from workflow_scripts.tokens.engines.hf_tokenizer import HFTokenizer

        return HFTokenizer.gpt2(self.model, self.merges) if self.kind == "gpt2" else HFTokenizer(self.model)


def from_config(section: dict[str, Any], trained_dir: str) -> TokenizerFiles:
    """The tokenizer of the config's ``tokenizer`` section: ``model`` (its kind read or given), else the one
    the workflow trains into ``trained_dir`` (``kind``: ``spm.model`` or ``tokenizer.json``)."""
    if section.get("model"):
        for key in ("model", "merges"):
            if section.get(key) and not os.path.isfile(section[key]):
                raise TokenizerKindError(f"tokenizer.{key}: {section[key]} is not a file")
        return TokenizerFiles.resolve(section["model"], section.get("type", "auto"), section.get("merges"))
    if section.get("kind") == "hf-bpe":
        return TokenizerFiles("hf", f"{trained_dir}/tokenizer.json")
    return TokenizerFiles("sentencepiece", f"{trained_dir}/spm.model")


def add_arguments(
    parser: argparse.ArgumentParser, help_model: str = "the data's tokenizer", required: bool = True
) -> None:
    """``--tokenizer-model``, ``--tokenizer-merges`` and ``--tokenizer-type``."""
    parser.add_argument(
        "--tokenizer-model",
        required=required,
        help=help_model + ": a SentencePiece .model, a tokenizer.json or a GPT-2 vocab.json",
    )
    parser.add_argument("--tokenizer-merges", help="a GPT-2 vocab.json's merges.txt (default: beside it)")
    parser.add_argument("--tokenizer-type", default="auto", choices=("auto", *KINDS))


def from_args(args: argparse.Namespace) -> TokenizerFiles:
    """The tokenizer files ``add_arguments``' options name."""
    return TokenizerFiles.resolve(args.tokenizer_model, args.tokenizer_type, args.tokenizer_merges)


def options(files: TokenizerFiles, given_type: str = "auto") -> list[str]:
    """The command options beyond ``--tokenizer-model`` that name ``files`` (none for one file whose kind
    is read from it)."""
    merges = ["--tokenizer-merges", files.merges] if files.merges else []
    return merges + (["--tokenizer-type", files.kind] if given_type != "auto" else [])
