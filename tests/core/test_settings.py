from pathlib import Path

import pytest

from engine.core.settings import ConfigFileError, load_settings


def test_defaults_come_from_default_toml():
    s = load_settings()
    assert s.search.rrf_k == 60
    assert s.search.recency_half_life_days == 0       # seed 001: recency off by default
    assert s.search.recency_mode == "band" and s.search.recency_band == 0.07
    assert s.chunking.max_tokens == 256 and s.chunking.overlap_tokens == 32
    assert s.models.active == "all-minilm-l6-v2"
    assert s.data_dir == Path("./data").resolve()


def test_file_overrides_default_and_env_overrides_file(tmp_path, monkeypatch):
    cfg = tmp_path / "user.toml"
    cfg.write_text('data_dir = "/tmp/from-file"\n[search]\nrecency_half_life_days = 7\nk = 25\n')
    s = load_settings(cfg)
    assert s.search.recency_half_life_days == 7
    assert s.search.k == 25
    assert s.search.rrf_k == 60  # untouched keys of a table keep their default
    assert s.data_dir == Path("/tmp/from-file")

    monkeypatch.setenv("REFINDERY_SEARCH__RECENCY_HALF_LIFE_DAYS", "45")
    monkeypatch.setenv("REFINDERY_DATA_DIR", str(tmp_path / "from-env"))
    s = load_settings(cfg)
    assert s.search.recency_half_life_days == 45
    assert s.search.k == 25  # the file still wins over the default where env says nothing
    assert s.data_dir == tmp_path / "from-env"


def test_env_nested_variable_without_file(monkeypatch):
    monkeypatch.setenv("REFINDERY_SEARCH__RECENCY_HALF_LIFE_DAYS", "30")   # seed 001's way to turn it on
    assert load_settings().search.recency_half_life_days == 30


def test_config_from_environment_variable(tmp_path, monkeypatch):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[search]\nrrf_k = 10\n")
    monkeypatch.setenv("REFINDERY_CONFIG", str(cfg))
    assert load_settings().search.rrf_k == 10


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigFileError, match="not found"):
        load_settings(tmp_path / "nope.toml")


def test_invalid_value_is_rejected(monkeypatch):
    monkeypatch.setenv("REFINDERY_SEARCH__ROLLUP", "median")
    with pytest.raises(Exception, match="rollup"):
        load_settings()


def test_every_setting_is_in_default_toml():
    """default.toml documents every field of the settings model."""
    import tomllib

    from engine.core.settings import DEFAULT_CONFIG, Settings

    raw = tomllib.loads(DEFAULT_CONFIG.read_text())
    for name, field in Settings.model_fields.items():
        assert name in raw, name
        sub = field.annotation
        if hasattr(sub, "model_fields"):
            assert set(sub.model_fields) == set(raw[name]), name


def test_default_toml_and_the_field_defaults_agree_value_for_value():
    """Each value is written twice — in default.toml (what a user reads and copies) and as the
    field's default (what code building a section alone gets): they must not drift apart."""
    import tomllib

    from engine.core.settings import DEFAULT_CONFIG, Settings

    raw = tomllib.loads(DEFAULT_CONFIG.read_text())
    drift = []
    for name, field in Settings.model_fields.items():
        sub = field.annotation
        if hasattr(sub, "model_fields"):
            coded, written = sub().model_dump(), sub(**raw[name]).model_dump()
            drift += [f"[{name}] {k}: default.toml {written[k]!r}, field {coded[k]!r}"
                      for k in coded if coded[k] != written[k]]
    assert not drift, "\n".join(drift)
