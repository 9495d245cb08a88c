"""The fixtures the relation-search seed's examples import: `make_client()` and `roster(client)`."""
from __future__ import annotations

import tempfile
from pathlib import Path


def make_client(data_dir: str | Path | None = None, pool=None, **settings_overrides):
    """A fresh FastAPI TestClient over a fresh app and a temporary data dir, with no brief-compile
    model configured. Nothing is loaded until a request needs it (relation search needs no model).
    `pool` shares already-loaded embedders; `settings_overrides` are settings sections, as in
    load_settings (e.g. compiler={...})."""
    from fastapi.testclient import TestClient

    from engine.core.corpus import open_corpus
    from engine.core.settings import load_settings
    from server.app import create_app

    data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="refindery-example-"))
    settings = load_settings(data_dir=str(data_dir), **settings_overrides)
    corpus = open_corpus(settings, pool)
    client = TestClient(create_app(settings, corpus))
    client.data_dir = Path(settings.data_dir)
    client.corpus = corpus
    return client
