"""Typed settings: one frozen dataclass per stage, defaults read from ``config/schema.yaml``, CLI derived.

A settings field is declared with ``setting(section, key)``: its default is the schema's default for that
key (``None`` where the schema has none), so defaults live only in the schema. ``add_arguments`` turns the
fields into command-line options (``--some-key``; booleans get ``--no-some-key``), ``from_args`` reads them
back, ``to_args`` renders a settings object as those options (what the rules pass), and ``from_config``
builds one from a validated config section.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import orjson

from workflow_scripts.core import cache

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"
T = TypeVar("T")


@functools.cache
def schema() -> dict[str, Any]:
    """The configuration schema (parsed once per version of the file: importing and running the YAML parser
    costs every job's command about 40 ms, reading the cached JSON 1 ms)."""
    text = SCHEMA_PATH.read_bytes()
    name = f"schema-{hashlib.sha256(text).hexdigest()[:32]}.json"
    if (parsed := cache.read(name)) is not None:
        return orjson.loads(parsed)
    import yaml

    result = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # C: 10x
    cache.write(name, orjson.dumps(result))
    return result


def schema_entry(section: str, key: str) -> dict[str, Any]:
    """The schema of ``key`` in ``section``: a dotted path (``dedup``, ``sources.items``; ``""``: top)."""
    node = schema()
    for part in filter(None, section.split(".")):
        node = node["properties"][part] if part != "items" else node["items"]
    return node["properties"][key]


def setting(section: str, key: str | None = None, *, flags: tuple[str, ...] = (), help: str = "") -> Any:
    """A dataclass field whose default is the schema's default of ``section.key`` (None if it has none)."""
    entry = schema_entry(section, key) if key else {}
    meta = {"section": section, "key": key, "flags": flags, "help": help or entry.get("description", "")}
    meta["choices"] = entry.get("enum")
    default = entry.get("default")
    if isinstance(default, list):
        return dataclasses.field(default=tuple(default), metadata=meta)
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.metadata.get("section") is not None]


def _base(kind: Any) -> tuple[Any, bool]:
    """(underlying type, optional?) of an annotation such as ``int | None``."""
    args = typing.get_args(kind)
    if isinstance(kind, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True
    return kind, False


def _flag(field: dataclasses.Field) -> str:
    return f"--{field.name.replace('_', '-')}"


def _key_value(spec: str) -> tuple[str, str]:
    key, sep, value = spec.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {spec!r}")
    return key, value


def add_arguments(parser: argparse.ArgumentParser, cls: type, title: str = "settings") -> None:
    """One option per settings field of ``cls``; defaults and choices from the schema."""
    group = parser.add_argument_group(f"{title} (defaults from config/schema.yaml)")
    for field, kind in _fields(cls):
        base, _ = _base(kind)
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        names = [_flag(field), *field.metadata["flags"]]
        help_text = f"{field.metadata['help']} [{default}]".strip()
        options: dict[str, Any] = {"dest": field.name, "help": help_text}
        origin = typing.get_origin(base)
        if base is bool:
            group.add_argument(*names, action=argparse.BooleanOptionalAction, default=default, **options)
        elif origin is tuple:
            group.add_argument(*names, nargs="*", default=list(default or ()), **options)
        elif origin is dict:
            group.add_argument(
                *names, type=_key_value, action="append", metavar="KEY=VALUE", default=None, **options
            )
        else:
            choices = field.metadata["choices"]
            group.add_argument(*names, type=base, choices=choices, default=default, **options)


def from_args(cls: type[T], args: argparse.Namespace, **extra: Any) -> T:
    """The settings given on the command line (``extra`` adds fields that are not options)."""
    values: dict[str, Any] = {}
    for field, kind in _fields(cls):
        value = getattr(args, field.name)
        origin = typing.get_origin(_base(kind)[0])
        if origin is tuple:
            value = tuple(value)
        elif origin is dict:
            value = dict(value) if value is not None else field.default_factory()
        values[field.name] = value
    return cls(**values, **extra)


def to_args(settings: Any, exclude: tuple[str, ...] = ()) -> list[str]:
    """``settings`` as the options ``add_arguments`` defines: every field but ``exclude``, explicitly."""
    args: list[str] = []
    for field, kind in _fields(type(settings)):
        if field.name in exclude:
            continue
        value, flag = getattr(settings, field.name), _flag(field)
        base, _ = _base(kind)
        if value is None:
            continue
        if base is bool:
            args.append(flag if value else f"--no-{flag[2:]}")
        elif typing.get_origin(base) is tuple:
            args += [flag, *map(str, value)]
        elif typing.get_origin(base) is dict:
            for k, v in value.items():
                args += [flag, f"{k}={v}"]
        else:
            args += [flag, str(value)]
    return args


def from_config(cls: type[T], section: dict[str, Any], **extra: Any) -> T:
    """Settings from a (validated) config section; keys the section lacks keep the schema's default."""
    values: dict[str, Any] = {}
    for field, _ in _fields(cls):
        key = field.metadata["key"] or field.name
        if key in section:
            value = section[key]
            values[field.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values, **extra)
