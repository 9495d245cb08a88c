"""The evidence face's entry points, shared by the HTTP routes, the MCP tools and the CLI."""
from __future__ import annotations

import re

from engine.core.corpus import Corpus
from engine.evidence.dictionary import DictionaryError, describe, install_dictionary
from engine.evidence.maps import slug, workspace_maps
from engine.evidence.packet import adopt_legacy, load_state, names, packet_dir, packet_lock
from engine.evidence.search import (SESSION, DictionaryInvalid, EvidenceRequest, EvidenceResponse,  # noqa: F401
                     EvidenceSearch, PackAxes, PacketNotFound, packet_visible, workspace_dictionary)


def read_packet(corpus: Corpus, session_id: str, topic: str | None, part: str, workspace: str,
                scopes: tuple[str, ...] | None = None) -> str:
    """A packet's Markdown, from the folder of the workspace and of the caller's `scopes` (a key's
    grant): another workspace's or another set of scopes' packet of the same session is not there."""
    if not re.fullmatch(SESSION, session_id) or (topic is not None and not slug(topic)):
        raise PacketNotFound(f"no evidence packet for session {session_id!r}", ref=session_id)
    scopes = tuple(sorted(set(scopes))) if scopes else None
    packet, appendix = names(session_id, slug(topic) if topic else None)
    folder = packet_dir(corpus.settings.reports_dir, workspace, scopes)
    with packet_lock(folder / packet):
        adopt_legacy(corpus.settings.reports_dir, folder, packet, workspace, scopes)
    path = folder / (packet if part == "packet" else appendix)
    state = load_state(folder, packet)
    if not path.is_file() or state is None or not packet_visible(state, workspace, scopes):
        raise PacketNotFound(f"no evidence {part} {path.name} in the reports folder", ref=session_id)
    return path.read_text(encoding="utf-8")


def show_dictionary(corpus: Corpus, workspace: str, pack_axes: PackAxes, limit: int = 1000) -> dict:
    packs = list(corpus.settings.evidence.packs)
    return describe(workspace_dictionary(corpus.relations, corpus.settings.dictionary_dir, workspace, pack_axes, packs),
                    workspace, limit)


def set_dictionary(corpus: Corpus, workspace: str, fmt: str, text: str) -> dict:
    ws = workspace
    try:
        return install_dictionary(corpus.settings.dictionary_dir, ws, fmt, text)
    except DictionaryError as exc:
        raise DictionaryInvalid(f"the dictionary cannot be read: {exc}", workspace=ws) from exc


def show_maps(corpus: Corpus, workspace: str) -> dict:
    ws = workspace
    m = workspace_maps(corpus, ws)
    return {"workspace": ws, "generation": m.generation, "pages": m.pages, "overview": m.overview_path,
            "groups": [{"kind": g.kind, "value": g.value, "label": g.label, "pages": len(g.pages), "map": g.path}
                       for g in m.groups],
            "notes_version": m.notes_version,
            "notes": [{"version": n.version, "group": n.group_key, "map": (m.group(n.group_key)
                       or m.group("found:retrieval")).path, "page_id": n.page_id, "url": n.url, "title": n.title,
                       "sub_query": n.sub_query, "confidence": n.confidence, "session_id": n.session_id,
                       "written_at": n.written_at.isoformat()} for n in m.notes]}
