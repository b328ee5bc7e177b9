"""The few fields of a SentencePiece ``ModelProto`` the fast encoder needs, read from the wire format.

``sentencepiece_model_pb2`` (shipped with sentencepiece) needs the ``protobuf`` package; these dozen fields
do not: ``TrainerSpec`` and ``NormalizerSpec`` are read with their proto2 defaults, and a variant model is
a copy with one ``NormalizerSpec`` field appended (protobuf merges a repeated sub-message, the last scalar
wins).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

# Field numbers of sentencepiece_model.proto.
_TRAINER, _NORMALIZER = 2, 3
_TRAINER_FIELDS = {
    3: "model_type",
    22: "split_by_whitespace",
    24: "treat_whitespace_as_suffix",
    26: "allow_whitespace_only_pieces",
    35: "byte_fallback",
}
_NORMALIZER_FIELDS = {3: "add_dummy_prefix", 4: "remove_extra_whitespaces", 5: "escape_whitespaces"}


@dataclass(frozen=True)
class ModelOptions:
    """The encoding-relevant options of a model (proto2 defaults where a field is absent)."""

    model_type: int = 1  # UNIGRAM=1, BPE=2, WORD=3, CHAR=4
    split_by_whitespace: bool = True
    treat_whitespace_as_suffix: bool = False
    allow_whitespace_only_pieces: bool = False
    byte_fallback: bool = False
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True
    charsmap: bool = False  # the normalizer has a precompiled character map (not identity)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, varint value or length-delimited bytes) of one message; fixed-width fields skipped."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            yield number, data[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def read_options(model: bytes) -> ModelOptions:
    """The options of a serialized ``ModelProto``."""
    values: dict[str, int | bool] = {}
    for number, sub in _fields(model):
        if number not in (_TRAINER, _NORMALIZER) or not isinstance(sub, bytes):
            continue
        names = _TRAINER_FIELDS if number == _TRAINER else _NORMALIZER_FIELDS
        for field, value in _fields(sub):
            if field in names and isinstance(value, int):
                values[names[field]] = value if names[field] == "model_type" else bool(value)
            elif number == _NORMALIZER and field == 2:  # precompiled_charsmap
                values["charsmap"] = bool(value)
    return ModelOptions(**values)  # type: ignore[arg-type]


def with_dummy_prefix(model: bytes, add: bool) -> bytes:
    """``model`` with ``normalizer_spec.add_dummy_prefix`` set to ``add``."""
    return model + bytes([_NORMALIZER << 3 | 2, 2, 3 << 3, int(add)])
