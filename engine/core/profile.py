"""Which profile runs (settings.profile) and whether what it needs is installed.

"default" runs models.active (all-MiniLM-L6-v2: quick to ingest); "quality" runs models.quality
(all-mpnet-base-v2 on ONNX Runtime, int8 with its sensitive products in fp32), the one that puts the
page you want first more often (eval/results/refind_quality.md) at a fraction of the ingest rate
(bench/results/profiles.md). Settings apply it (Settings._apply_profile); this says what runs, and
what a server must refuse to start without."""
from __future__ import annotations

from engine.core.settings import Settings
from models.registry import ModelNotFound, ModelRegistry


def describe(settings: Settings) -> dict:
    """The profile and the embedder it runs: what GET /v1/models and /healthz report."""
    return {"profile": settings.profile, "embedder": settings.models.active}


def missing(settings: Settings) -> str | None:
    """Why the profile cannot run here (its embedder's weights are not installed: the message names
    the command that installs them), or None. Offline: nothing is fetched, only looked for."""
    name = settings.models.active
    reg = ModelRegistry(settings.registry_path, settings.models_cache_dir, data_dir=settings.data_dir)
    try:
        spec = reg.spec(name)
    except ModelNotFound as exc:
        return f"the {settings.profile} profile's embedder: {exc}"
    if spec.kind != "embedder":
        return f"the {settings.profile} profile's embedder {name!r} is a {spec.kind}, not an embedder"
    if reg.is_available(name):
        return None
    how = f"; install it with: {spec.install}" if spec.install else ""
    return f"the {settings.profile} profile's embedder {name!r} is not installed here{how}"
