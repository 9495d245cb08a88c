"""What both framework retrievers put in a result: a page's text (its best snippet) and metadata."""
from __future__ import annotations

from typing import Any

from .models import PageHit


def page_metadata(hit: PageHit) -> dict[str, Any]:
    """What a retriever puts beside a page's text (shared with the LlamaIndex retriever)."""
    sn = hit.snippets[0] if hit.snippets else None
    return {"page_id": hit.page_id, "url": hit.url, "title": hit.title, "domain": hit.domain,
            "score": hit.score, "rank": hit.rank, "last_seen": hit.last_seen.isoformat(),
            "chunk_id": sn.chunk_id if sn else None, "char_start": sn.char_start if sn else None,
            "char_end": sn.char_end if sn else None, "section_path": list(sn.section_path) if sn else []}


def page_text(hit: PageHit) -> str:
    return hit.snippets[0].text if hit.snippets else (hit.title or hit.url)
