"""The evidence face's entry points, shared by the HTTP routes, the MCP tools and the CLI."""
from __future__ import annotations

import re

from engine.core.corpus import Corpus
from engine.evidence.dictionary import DictionaryError, describe, install_dictionary
from engine.evidence.maps import slug, workspace_maps
from engine.evidence.packet import load_state, names
from engine.evidence.search import (SESSION, DictionaryInvalid, EvidenceRequest, EvidenceResponse,  # noqa: F401
                     EvidenceSearch, PacketNotFound, packet_visible, workspace_dictionary)


def read_packet(corpus: Corpus, session_id: str, topic: str | None = None, part: str = "packet",
                may_read=None, scopes: tuple[str, ...] | None = None) -> str:
    """A packet's Markdown. `may_read(workspace)` and `scopes` (a key's grant) hide packets of other
    workspaces and packets written from documents the key may not read."""
    if not re.match(SESSION, session_id) or (topic is not None and not slug(topic)):
        raise PacketNotFound(f"no evidence packet for session {session_id!r}", ref=session_id)
    packet, appendix = names(session_id, slug(topic) if topic else None)
    path = corpus.settings.reports_dir / (packet if part == "packet" else appendix)
    state = load_state(corpus.settings.reports_dir, packet)
    hidden = may_read is not None and (state is None or not may_read(state["workspace"]))
    if not path.is_file() or hidden or (scopes and (state is None or not packet_visible(state, None, scopes))):
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
                       for g in m.groups],
            "notes_version": m.notes_version,
            "notes": [{"version": n.version, "group": n.group_key, "map": (m.group(n.group_key)
                       or m.group("found:retrieval")).path, "page_id": n.page_id, "url": n.url, "title": n.title,
                       "sub_query": n.sub_query, "confidence": n.confidence, "session_id": n.session_id,
                       "written_at": n.written_at.isoformat()} for n in m.notes]}
