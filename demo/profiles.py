"""The document demo: 30 invented expert profiles (demo/profiles/*.md, Markdown with YAML front
matter and prose; every name, company and career is invented), loaded into workspace `profiles`
by `make demo` through the expert_network pack's document readers: roles from the front matter,
screenings from the labelled lines under "Screening", engagements from the table under
"Engagements". The prose is what criteria and ideas read.
"""
from __future__ import annotations

import shutil
from pathlib import Path

FOLDER = Path(__file__).parent / "profiles"

# The load body: who each document is about (front-matter `id`), their display name (`name`), and
# which relation every profile states in full (a profile lists all of a person's roles; it does
# not always mention a screening, so screenings stay "not recorded" where none is written).
LOAD = {"documents": {"key_path": "id", "name_path": "name"}, "coverage": ["held_role"]}


def copy_to(folder: Path) -> Path:
    """The profiles copied into `folder` (the data dir's source folder), so a data dir carries the
    documents its receipts re-read."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in sorted(FOLDER.glob("*.md")):
        shutil.copyfile(f, folder / f.name)
    return folder
