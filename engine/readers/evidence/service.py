"""The evidence face's entry points, shared by the HTTP routes, the MCP tools and the CLI."""
from __future__ import annotations

import re

from ...corpus import Corpus
from ...errors import EngineError
from .dictionary import DictionaryError, describe, install_dictionary
from .maps import slug, workspace_maps
from .packet import names
from .search import (SESSION, DictionaryInvalid, EvidenceRequest, EvidenceResponse,  # noqa: F401
                     EvidenceSearch, workspace_dictionary)


class PacketNotFound(EngineError):
    status, type = 404, "packet_not_found"


def read_packet(corpus: Corpus, session_id: str, topic: str | None = None, part: str = "packet") -> str:
    if not re.match(SESSION, session_id) or (topic is not None and not slug(topic)):
        raise PacketNotFound(f"no evidence packet for session {session_id!r}", ref=session_id)
    packet, appendix = names(session_id, slug(topic) if topic else None)
    path = corpus.settings.reports_dir / (packet if part == "packet" else appendix)
    if not path.is_file():
        raise PacketNotFound(f"no evidence {part} {path.name} in the reports folder", ref=session_id)
    return path.read_text(encoding="utf-8")


def show_dictionary(corpus: Corpus, workspace: str | None, limit: int = 1000) -> dict:
    ws = workspace or corpus.settings.default_workspace
    return describe(workspace_dictionary(corpus, ws), ws, limit)


def set_dictionary(corpus: Corpus, workspace: str | None, fmt: str, text: str) -> dict:
    ws = workspace or corpus.settings.default_workspace
    try:
        return install_dictionary(corpus.settings.dictionary_dir, ws, fmt, text)
    except DictionaryError as exc:
        raise DictionaryInvalid(f"the dictionary cannot be read: {exc}", workspace=ws) from exc


def show_maps(corpus: Corpus, workspace: str | None) -> dict:
    ws = workspace or corpus.settings.default_workspace
    m = workspace_maps(corpus, ws)
    return {"workspace": ws, "generation": m.generation, "pages": m.pages, "overview": m.overview_path,
            "groups": [{"kind": g.kind, "value": g.value, "label": g.label, "pages": len(g.pages), "map": g.path}
                       for g in m.groups]}
