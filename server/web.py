"""The web page for refind search and A/B comparison: static files (no build step) served by the
same app — the page at `/`, its script and style under `/ui/`. It talks to the API like any client."""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

WEB_DIR = Path(__file__).resolve().parent / "web"


def mount_web(app: FastAPI) -> None:
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers={"cache-control": "no-cache"})

    app.mount("/ui", StaticFiles(directory=WEB_DIR), name="ui")
