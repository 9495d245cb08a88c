"""The model registry (configs/models.toml) and offline resolution of each entry to a local path."""
from __future__ import annotations

import importlib
import importlib.util
import json
import re
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
    def __init__(self, path: Path, cache_dir: Path, search_paths: list[Path] | None = None,
                 data_dir: Path | None = None):
        self.path = Path(path)
        self.cache_dir = Path(cache_dir)
        # A "path" entry may start with "{data_dir}": models that live with a deployment's data
        # (a reranker trained on its corpus) rather than with the code.
        self.data_dir = Path(data_dir) if data_dir is not None else None
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

    def declared_path(self, name: str) -> Path | None:
        """Where a "path" entry says its folder is (whether or not it exists yet); None otherwise."""
        spec = self.spec(name)
        if spec.source != "path":
            return None
        raw = spec.path or ""
        if "{data_dir}" in raw:
            if self.data_dir is None:
                raise ModelNotFound(name, f"model {name!r}: its path {raw!r} needs a data dir")
            raw = raw.replace("{data_dir}", str(self.data_dir))
        p = Path(raw).expanduser()
        return p if p.is_absolute() else (self.path.parent / p)

    # Resolution ------------------------------------------------------------------------------
    def resolve(self, name: str) -> Path:
        """Local folder holding the model's weights. Never touches the network."""
        spec = self.spec(name)
        hint = f"; install it with: {spec.install}" if spec.install else ""
        if spec.source == "path":
            p = self.declared_path(name)
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
                target = self._zip_root(spec) / (spec.inner or "")
                return target.is_dir() or all(_find_in_site(p, self.search_paths) for p in spec.parts)
            self.resolve(name)
            return True
        except ModelNotFound:
            return False

    def _zip_root(self, spec: ModelSpec) -> Path:
        """Where a split zip is unpacked: <cache>/<name>, or <cache>/<unpack_as> when an entry shares
        another's weights (all-mpnet-base-v2-int8 runs all-mpnet-base-v2's folder: unpacked once)."""
        return self.cache_dir / str(spec.extra.get("unpack_as") or spec.name)

    def _assemble_split_zip(self, spec: ModelSpec, hint: str) -> Path:
        target_root = self._zip_root(spec)
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


def register_reranker(registry_path: Path, name: str, path: Path, max_seq_length: int | None = None,
                      note: str | None = None, extra: dict[str, str] | None = None) -> bool:
    """Add (or replace) `[rerankers.<name>]` in a registry file, pointing at a local folder.

    The file is edited as text so its comments survive: an existing block of that name is cut out
    (up to the next table header) and a new block is appended. Returns False when an identical
    entry is already there. The path is written relative to the registry's folder when it lies
    under it, so a checkout can move. `extra`: more string keys of the entry (`backend`, `onnx_file`).
    """
    extra = extra or {}
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ValueError(f"reranker name {name!r}: use letters, digits, '.', '_' and '-'")
    registry_path = Path(registry_path)
    text = registry_path.read_text() if registry_path.exists() else ""
    path = Path(path).resolve()
    try:
        shown = str(path.relative_to(registry_path.parent.resolve()))
    except ValueError:
        shown = str(path)
    if text:
        current = tomllib.loads(text).get("rerankers", {}).get(name)
        if current and current.get("source") == "path" and "{data_dir}" not in current.get("path", ""):
            p = Path(current.get("path", "")).expanduser()
            p = p if p.is_absolute() else registry_path.parent / p
            if (p.resolve() == path and current.get("max_seq_length") == max_seq_length
                    and all(current.get(k) == v for k, v in extra.items())):
                return False
    header = re.compile(rf"^\[rerankers\.(\"?){re.escape(name)}\1\]\s*$")
    out, skipping = [], False
    for line in text.splitlines():
        if header.match(line.strip()):
            skipping = True
            continue
        if skipping and line.strip().startswith("["):
            skipping = False
        if not skipping:
            out.append(line)
    while out and not out[-1].strip():
        out.pop()
    block = ([f"# {note}"] if note else []) + [f"[rerankers.{name}]", 'source = "path"', f"path = {json.dumps(shown)}"]
    if max_seq_length:
        block.append(f"max_seq_length = {int(max_seq_length)}")
    block += [f"{k} = {json.dumps(str(v))}" for k, v in extra.items()]
    new = "\n".join(out + ([""] if out else []) + block) + "\n"
    tomllib.loads(new)  # never write a registry that does not parse
    tmp = registry_path.with_suffix(registry_path.suffix + ".tmp")
    tmp.write_text(new)
    tmp.replace(registry_path)
    return True
