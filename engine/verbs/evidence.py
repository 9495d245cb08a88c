"""Evidence search's verbs: the search, its packets, the workspace's dictionary and maps."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.core.access import OPEN, Forbidden, Grant
from engine.evidence import service as evidence
from engine.evidence.confidence import Calibration, chunk_cosines
from engine.relations.packs import vocabulary_axes
from engine.verbs.base import Verbs


class EvidenceVerbs(Verbs):
    _evidence: evidence.EvidenceSearch | None = None

    @property
    def evidence_searcher(self) -> evidence.EvidenceSearch:
        if self._evidence is None:
            self._evidence = evidence.EvidenceSearch(self.corpus, self.pages, vocabulary_axes)
        return self._evidence

    def evidence_with(self, calibration: Calibration, reports_dir: Path) -> evidence.EvidenceSearch:
        """An evidence searcher under another confidence calibration, writing its packets to
        `reports_dir` (evaluation: a fit is checked on the collections it was not fitted on)."""
        settings = self.settings.evidence.model_copy(update={"reports_dir": str(reports_dir)})
        return evidence.EvidenceSearch(self.corpus, self.pages, vocabulary_axes, calibration=calibration,
                                       settings=settings)

    def chunk_cosines(self, text: str, chunk_ids: list[int], model: str | None = None) -> dict[int, float]:
        """Cosine of the query's embedding to each chunk's stored vector (the confidence signals)."""
        model = model or self.settings.models.active
        vec = self.corpus.embedder(model).encode_query(text)
        vec = vec / (np.linalg.norm(vec) or 1.0)
        return chunk_cosines(self.store, model, vec, chunk_ids)

    def evidence(self, req: evidence.EvidenceRequest, caller: Grant = OPEN) -> evidence.EvidenceResponse:
        """`map_write` writes into the workspace's maps: it needs a caller that may write."""
        if "map_write" in req.route_constraints:
            caller.require_write()
        req.workspace = self.workspace_for(caller, req.workspace)
        return self.evidence_searcher.search(req, scopes=caller.document_scopes)

    def read_packet(self, session_id: str, topic: str | None = None, part: str = "packet",
                    workspace: str | None = None, caller: Grant = OPEN) -> str:
        ws = self.workspace_for(caller, workspace)
        return evidence.read_packet(self.corpus, session_id, topic, part, ws, scopes=caller.document_scopes)

    def dictionary(self, workspace: str | None = None, limit: int = 1000, caller: Grant = OPEN) -> dict:
        ws = self.workspace_for(caller, workspace)
        return evidence.show_dictionary(self.corpus, ws, vocabulary_axes, limit)

    def set_dictionary(self, workspace: str | None, fmt: str, text: str, caller: Grant = OPEN) -> dict:
        """The workspace's dictionary expands every key's questions: a caller without document scopes only."""
        caller.require_write()
        ws = self.workspace_for(caller, workspace)
        caller.require_unscoped("the workspace's dictionary")
        return evidence.set_dictionary(self.corpus, ws, fmt, text)

    def maps(self, workspace: str | None = None, caller: Grant = OPEN) -> dict:
        ws = self.workspace_for(caller, workspace)
        if caller.scopes:
            raise Forbidden("maps are drawn over every document of a workspace; a key with document scopes cannot "
                            "read them", key_id=caller.key_id)
        return evidence.show_maps(self.corpus, ws)
