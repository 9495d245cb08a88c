"""Page records as users send them (JSONL lines, files in a folder, POST /v1/pages items)."""
from __future__ import annotations

import gzip
import io
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Iterator

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator,
                      model_validator)

from indexes.store import MAX_ALIAS_CHARS, MAX_ALIASES

from engine.core.urls import normalize_url
from engine.core.values import Int64, Name, StorableDate, Text, encodable

FOLDER_SUFFIXES = {".md", ".markdown", ".txt", ".html", ".htm"}


Alias = Annotated[str, StringConstraints(max_length=MAX_ALIAS_CHARS), AfterValidator(encodable)]


class EntityInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    canonical: Text = Field(min_length=1, max_length=MAX_ALIAS_CHARS)
    aliases: list[Alias] = Field(default_factory=list, max_length=MAX_ALIASES, description=(
        f"Other names it goes by: at most {MAX_ALIASES}, each of at most {MAX_ALIAS_CHARS} characters."))
    id: Name | None = Field(default=None, max_length=200)


class PageInput(BaseModel):
    """One page. `body_text` or `html` (extracted with trafilatura) must be given. Every value is
    checked against what the store and both indexes can hold (engine/core/values.py), so a page either
    goes in whole or is refused with its reason."""
    model_config = ConfigDict(extra="ignore")

    url: Text = Field(min_length=1, max_length=8192)
    title: Text | None = Field(default=None, max_length=2000)
    body_text: Text | None = None
    html: Text | None = None
    seen_at: StorableDate | None = None
    published: StorableDate | None = None
    entities: list[Text | EntityInput] = Field(default_factory=list, max_length=1000)
    scope: Name | None = Field(default=None, min_length=1, max_length=200)
    cluster_id: Int64 | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        normalize_url(v)  # an unsupported scheme (javascript:, data:, ftp:) or no host: refused here
        return v

    @model_validator(mode="after")
    def _has_text(self) -> "PageInput":
        if (self.body_text is None or not self.body_text.strip()) and not (self.html and self.html.strip()):
            if not (self.title and self.title.strip()):
                raise ValueError("a page needs body_text, html, or at least a title")
        return self


class VisitInput(BaseModel):
    """A visit of a page already sent (POST /v1/visits): its URL, when, and its scope as a page's."""
    model_config = ConfigDict(extra="forbid")

    url: Text = Field(min_length=1, max_length=8192)
    seen_at: StorableDate | None = None
    scope: Name | None = Field(default=None, min_length=1, max_length=200)


class RecordError(BaseModel):
    line: int
    source: str
    error: str


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e.get("loc", ())) or "record"
        parts.append(f"{loc}: {e.get('msg')}")
    return "; ".join(parts)


def read_jsonl(stream: io.TextIOBase, source: str) -> Iterator[tuple[int, str, dict[str, Any] | RecordError]]:
    for n, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            yield n, source, RecordError(line=n, source=source, error=f"invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        if not isinstance(obj, dict):
            yield n, source, RecordError(line=n, source=source, error="a record must be a JSON object")
            continue
        yield n, source, obj


def read_folder(folder: Path, base_url: str | None = None) -> Iterator[tuple[int, str, dict[str, Any] | RecordError]]:
    """Each .md/.txt/.html file is a page; its URL is base_url + relative path, else file://."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES)
    for n, p in enumerate(files, start=1):
        rel = p.relative_to(folder).as_posix()
        url = (base_url.rstrip("/") + "/" + rel) if base_url else p.resolve().as_uri()
        try:
            raw = p.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            yield n, str(p), RecordError(line=n, source=str(p), error=f"cannot read: {exc}")
            continue
        seen = datetime.fromtimestamp(p.stat().st_mtime, tz=timezone.utc)
        rec: dict[str, Any] = {"url": url, "seen_at": seen.isoformat()}
        if p.suffix.lower() in (".html", ".htm"):
            rec["html"] = raw
        else:
            rec["body_text"] = raw
            first = next((ln.strip() for ln in raw.splitlines() if ln.strip()), "")
            rec["title"] = first.lstrip("#").strip()[:300] if first.startswith("#") else p.stem
        yield n, str(p), rec


def read_source(path: str, base_url: str | None = None) -> Iterator[tuple[int, str, dict[str, Any] | RecordError]]:
    """Records from a JSONL file (optionally .gz), '-' for standard input, or a folder."""
    if path == "-":
        yield from read_jsonl(sys.stdin, "<stdin>")
        return
    p = Path(path)
    if p.is_dir():
        yield from read_folder(p, base_url)
        return
    if not p.is_file():
        raise FileNotFoundError(f"no such file or folder: {p}")
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as fh:
        yield from read_jsonl(fh, str(p))
