"""One settings model, layered: configs/default.toml < user file < REFINDERY_* environment."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "default.toml"


from engine.core.settings_sections import (  # noqa: F401 — named from here too
    ModelsSettings, ChunkingSettings, IngestSettings, ImportSettings, IndexSettings, MilvusSettings, SearchSettings,
    request_fields, CompilerSettings, CriteriaSettings, EvidenceSettings, LogSettings, ServerSettings, StoreSettings, RelationsSettings,
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="REFINDERY_",
        env_nested_delimiter="__",
        extra="ignore",
    )

    data_dir: Path = Path("./data")
    default_workspace: str = "default"
    # "default" (the quick start: models.active) or "quality" (models.quality active: stronger, slower
    # to ingest). `refindery --profile quality ...`, REFINDERY_PROFILE=quality, or profile = "quality".
    profile: Literal["default", "quality"] = "default"
    models: ModelsSettings = Field(default_factory=ModelsSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    imports: ImportSettings = Field(default_factory=ImportSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    log: LogSettings = Field(default_factory=LogSettings)
    compiler: CompilerSettings = Field(default_factory=CompilerSettings)
    criteria: CriteriaSettings = Field(default_factory=CriteriaSettings)
    evidence: EvidenceSettings = Field(default_factory=EvidenceSettings)
    relations: RelationsSettings = Field(default_factory=RelationsSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    milvus: MilvusSettings = Field(default_factory=MilvusSettings)

    # set by the corpus from its store (engine/core/switch.py), never from a file or the environment
    _switch_target: str | None = PrivateAttr(None)

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, v: Path) -> Path:
        return v.expanduser().resolve()

    @model_validator(mode="after")
    def _apply_profile(self) -> "Settings":
        """The quality profile runs models.quality wherever the active embedder is read."""
        if self.profile == "quality":
            self.models.active = self.models.quality
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Earlier sources win; nested tables are merged key by key.
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if _user_config is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=_user_config))
        sources.append(TomlConfigSettingsSource(settings_cls, toml_file=DEFAULT_CONFIG))
        return tuple(sources)

    # Derived locations -------------------------------------------------------------------
    @property
    def registry_path(self) -> Path:
        p = Path(self.models.registry).expanduser()
        return p if p.is_absolute() else (CONFIG_DIR / p)

    @property
    def models_cache_dir(self) -> Path:
        return Path(self.models.cache_dir).expanduser() if self.models.cache_dir else self.data_dir / "models"

    @property
    def reports_dir(self) -> Path:
        d = self.evidence.reports_dir
        return Path(d).expanduser().resolve() if d else self.data_dir / "agent_reports"

    @property
    def dictionary_dir(self) -> Path:
        d = self.evidence.dictionary_dir
        return Path(d).expanduser().resolve() if d else self.data_dir / "dictionaries"

    @property
    def catch_up_model(self) -> str | None:
        """The embedder that catches up in the background instead of encoding on the write path (the
        quality profile's, with models.quality_fast set), else None."""
        m = self.models
        return m.active if self.profile == "quality" and m.quality_fast and m.quality_fast != m.active else None

    @property
    def fast_model(self) -> str | None:
        """The embedder that stands in for catch_up_model where it has not embedded a chunk yet."""
        return self.models.quality_fast if self.catch_up_model else None

    @property
    def switch_target(self) -> str | None:
        """The embedder a live switch is building in the background (engine/core/switch.py), else None."""
        return self._switch_target

    @property
    def background_models(self) -> list[str]:
        """The embedders a server embeds in its background rather than on the write path: the quality
        profile's catch-up model and a live switch's target."""
        return [m for m in dict.fromkeys([self.catch_up_model, self.switch_target]) if m]

    @property
    def embedder_names(self) -> list[str]:
        """Every embedder whose index is kept: the active one, the fast one of a catch-up, also_embed,
        the target of a live switch."""
        names = [self.models.active]
        names += [n for n in [self.fast_model, *self.models.also_embed, self.switch_target] if n and n not in names]
        return names

    @property
    def write_models(self) -> list[str]:
        """The embedders that encode a page before its write is acknowledged (all but the background ones)."""
        return [n for n in self.embedder_names if n not in self.background_models]


class ConfigFileError(ValueError):
    """The user config file named by --config or REFINDERY_CONFIG does not exist."""


def load_settings(config: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Build settings: default.toml < `config` (or $REFINDERY_CONFIG) < environment < overrides."""
    global _user_config
    path = config if config is not None else os.environ.get("REFINDERY_CONFIG") or None
    user = Path(path).expanduser().resolve() if path else None
    if user is not None and not user.is_file():
        raise ConfigFileError(f"config file not found: {user}")
    _user_config = user
    try:
        return Settings(**overrides)
    finally:
        _user_config = None
