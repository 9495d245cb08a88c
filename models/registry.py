"""The model registry (configs/models.toml) and offline resolution of each entry to a local path."""
from __future__ import annotations

import importlib
import importlib.util
import shutil
import site
import sysconfig
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


class ModelNotFound(LookupError):
    """A model name is not in the registry, or its weights are not installed here."""

    def __init__(self, name: str, message: str, install: str | None = None):
        super().__init__(message)
        self.name = name
        self.install = install


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str  # "embedder" | "reranker"
    source: str  # "package" | "path" | "split-zip"
    dim: int | None = None
    max_seq_length: int | None = None
    normalize: bool = True
    query_prefix: str = ""
    document_prefix: str = ""
    package: str | None = None
    subdir: str | None = None
    path: str | None = None
    parts: tuple[str, ...] = ()
    inner: str | None = None
    install: str | None = None
    extra: dict = field(default_factory=dict, hash=False, compare=False)


_KNOWN = {"source", "dim", "max_seq_length", "normalize", "query_prefix", "document_prefix",
          "package", "subdir", "path", "parts", "inner", "install"}


class ModelRegistry:
    def __init__(self, path: Path, cache_dir: Path, search_paths: list[Path] | None = None):
        self.path = Path(path)
        self.cache_dir = Path(cache_dir)
        # Where split-zip parts are looked for: site-packages, plus any folders given here.
        self.search_paths = [Path(p) for p in (search_paths or [])]
        with open(self.path, "rb") as fh:
            raw = tomllib.load(fh)
        self._specs: dict[str, ModelSpec] = {}
        for section, kind in (("embedders", "embedder"), ("rerankers", "reranker")):
            for name, entry in (raw.get(section) or {}).items():
                if "source" not in entry:
                    raise ValueError(f"{self.path}: model {name!r} has no 'source'")
                self._specs[name] = ModelSpec(
                    name=name,
                    kind=kind,
                    source=entry["source"],
                    dim=entry.get("dim"),
                    max_seq_length=entry.get("max_seq_length"),
                    normalize=bool(entry.get("normalize", True)),
                    query_prefix=entry.get("query_prefix", ""),
                    document_prefix=entry.get("document_prefix", ""),
                    package=entry.get("package"),
                    subdir=entry.get("subdir"),
                    path=entry.get("path"),
                    parts=tuple(entry.get("parts", ())),
                    inner=entry.get("inner"),
                    install=entry.get("install"),
                    extra={k: v for k, v in entry.items() if k not in _KNOWN},
                )

    def names(self, kind: str | None = None) -> list[str]:
        return sorted(n for n, s in self._specs.items() if kind is None or s.kind == kind)

    def spec(self, name: str) -> ModelSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise ModelNotFound(
                name, f"model {name!r} is not in the registry {self.path} (known: {', '.join(self.names())})"
            ) from None

    # Resolution ------------------------------------------------------------------------------
    def resolve(self, name: str) -> Path:
        """Local folder holding the model's weights. Never touches the network."""
        spec = self.spec(name)
        hint = f"; install it with: {spec.install}" if spec.install else ""
        if spec.source == "path":
            p = Path(spec.path or "").expanduser()
            p = p if p.is_absolute() else (self.path.parent / p)
            if not p.is_dir():
                raise ModelNotFound(name, f"model {name!r}: folder {p} does not exist{hint}", spec.install)
            return p.resolve()
        if spec.source == "package":
            if not spec.package or importlib.util.find_spec(spec.package) is None:
                raise ModelNotFound(name, f"model {name!r}: package {spec.package!r} is not installed{hint}",
                                    spec.install)
            mod = importlib.import_module(spec.package)
            if spec.subdir:
                p = Path(mod.__file__).parent / spec.subdir
            elif hasattr(mod, "get_model_path"):
                p = Path(mod.get_model_path())
            else:
                p = Path(mod.__file__).parent
            if not p.is_dir():
                raise ModelNotFound(name, f"model {name!r}: {p} is missing from package {spec.package}{hint}",
                                    spec.install)
            return p
        if spec.source == "split-zip":
            return self._assemble_split_zip(spec, hint)
        raise ValueError(f"model {name!r}: unknown source {spec.source!r}")

    def is_available(self, name: str) -> bool:
        try:
            spec = self.spec(name)
            if spec.source == "split-zip":
                target = self.cache_dir / name / (spec.inner or "")
                return target.is_dir() or all(_find_in_site(p, self.search_paths) for p in spec.parts)
            self.resolve(name)
            return True
        except ModelNotFound:
            return False

    def _assemble_split_zip(self, spec: ModelSpec, hint: str) -> Path:
        target_root = self.cache_dir / spec.name
        target = target_root / (spec.inner or "")
        if (target_root / ".complete").exists() and target.is_dir():
            return target
        parts = [_find_in_site(p, self.search_paths) for p in spec.parts]
        missing = [p for p, found in zip(spec.parts, parts) if found is None]
        if missing:
            raise ModelNotFound(spec.name, f"model {spec.name!r}: parts not installed ({', '.join(missing)}){hint}",
                                spec.install)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        # Join and unpack into a temporary folder, then rename: a crash leaves no half model.
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
            joined = Path(tmp) / "joined.zip"
            with open(joined, "wb") as out:
                for part in parts:
                    with open(part, "rb") as fh:
                        shutil.copyfileobj(fh, out, 1 << 22)
            staging = Path(tmp) / "unpacked"
            with zipfile.ZipFile(joined) as zf:
                zf.extractall(staging)
            (staging / ".complete").write_text("ok\n")
            if target_root.exists():
                shutil.rmtree(target_root)
            staging.rename(target_root)
        if not target.is_dir():
            raise ModelNotFound(spec.name, f"model {spec.name!r}: folder {spec.inner!r} not found in the zip")
        return target


def _find_in_site(rel: str, extra: list[Path] = ()) -> Path | None:
    roots = [*map(str, extra), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
             *site.getsitepackages()]
    for root in dict.fromkeys(roots):
        p = Path(root) / rel
        if p.is_file():
            return p
    return None
