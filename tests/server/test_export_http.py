"""GET /v1/export/pages over HTTP: a key exports only what it may read — its workspaces, its scopes —
and anything else is as if absent; POST /v1/export (a path) is the owner's socket's alone."""
from __future__ import annotations

import json

from conftest import page
from fastapi.testclient import TestClient

from engine.core.access import create_key
from server.app import create_app


def test_a_key_exports_the_pages_inside_its_walls_only(make_corpus, tmp_path):
    corpus = make_corpus()
    keys = {"admin": create_key(corpus.keys, ["*"])["token"],
            "team": create_key(corpus.keys, ["team"])["token"],
            "scoped": create_key(corpus.keys, ["team"], scopes=["alpha"])["token"]}
    h = {k: {"Authorization": f"Bearer {t}"} for k, t in keys.items()}
    with TestClient(create_app(corpus.settings, corpus)) as c:
        for ws, url, scope in [("team", "https://t.example/a", "alpha"), ("team", "https://t.example/b", "beta"),
                               ("team", "https://t.example/open", None), ("other", "https://o.example/x", None)]:
            body = {"pages": [page(url, f"Notes about {url} and zeppelins.", **({"scope": scope} if scope else {}))],
                    "workspace": ws}
            assert c.post("/v1/pages", json=body, headers=h["admin"]).status_code == 200

        def exported(who: str, **params) -> list[dict]:
            r = c.get("/v1/export/pages", params=params, headers=h[who])
            assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson"), r.text
            return [json.loads(line) for line in r.text.splitlines()]

        team = exported("team")
        assert sorted(p["url"] for p in team) == ["https://t.example/a", "https://t.example/b", "https://t.example/open"]
        assert all(p["visit_count"] == 1 and p["body_text"] and p["workspace"] == "team" for p in team)
        assert [p["url"] for p in exported("scoped")] == ["https://t.example/a"]   # its scope's only
        assert [p["url"] for p in exported("admin", workspace="other")] == ["https://o.example/x"]
        outside = c.get("/v1/export/pages", params={"workspace": "other"}, headers=h["team"])
        assert outside.status_code == 404 and outside.json()["detail"]["type"] == "workspace_not_found"
        assert c.get("/v1/export/pages").status_code == 401
        # a backup holds every workspace's pages and keys: a key of one workspace, or a scoped one, gets 403
        for who in ("team", "scoped"):
            r = c.post("/v1/backup", json={"name": f"by-{who}"}, headers=h[who])
            assert r.status_code == 403 and r.json()["detail"]["type"] == "forbidden"
        assert not (corpus.data_dir / "backups").exists()
        # a key never names a path on the server
        r = c.post("/v1/export", json={"what": "log", "path": str(tmp_path / "log")}, headers=h["admin"])
        assert r.status_code == 403 and not (tmp_path / "log").exists()
