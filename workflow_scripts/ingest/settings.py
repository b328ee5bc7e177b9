"""Settings of one ingest run: the stage's (config ``ingest``) and its source's (``sources``)."""

from __future__ import annotations

from dataclasses import dataclass

from workflow_scripts.core.settings import setting
from workflow_scripts.ingest.readers import IngestError


@dataclass(frozen=True)
class IngestSettings:
    """Settings of one ingest run: the stage's (config ``ingest``) and the source's (``sources``).

    Give ``lang``/``domain``/``subdomain`` or ``name_regex``.
    """

    shard_size: int = setting("ingest", "shard_size")
    compress: bool = setting("ingest", "compress")
    nfc: bool = setting("ingest", "nfc")
    min_chars: int = setting("ingest", "min_chars")
    min_words: int = setting("ingest", "min_words")
    strict: bool = setting("ingest", "strict")
    format: str = setting("sources.items", "format")
    text_key: tuple[str, ...] = setting("sources.items", "text_key")
    id_key: str = setting("sources.items", "id_key")
    name_regex: str | None = setting("sources.items", "name_regex")
    lang: str | None = setting("sources.items", "lang")
    domain: str | None = setting("sources.items", "domain")
    subdomain: str | None = setting("sources.items", "subdomain")

    def __post_init__(self) -> None:
        given = [v is not None for v in (self.lang, self.domain, self.subdomain)]
        if self.name_regex is None and not all(given):
            raise IngestError("give --lang, --domain and --subdomain, or --name-regex")
        if self.name_regex is not None and any(given):
            raise IngestError("--name-regex excludes --lang/--domain/--subdomain")
        if self.shard_size <= 0 or self.min_chars < 0 or self.min_words < 0:
            raise IngestError("shard_size must be > 0, min_chars and min_words >= 0")
        if not self.text_key:
            raise IngestError("at least one text key is needed")
