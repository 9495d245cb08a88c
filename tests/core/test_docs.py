"""The README and the pages under docs/: every relative link leads to a file that exists and every
#anchor to a heading in it (as GitHub names headings), and the README stays a short read with no
history in it (that is CHANGELOG.md's)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _outside_code(text: str) -> list[str]:
    lines, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    fence = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.+)", line)):
            base = slug(m.group(1))
            name, n = base, 0
            while name in out:   # a repeated heading gets -1, -2, ...
                n += 1
                name = f"{base}-{n}"
            out.add(name)
    return out


def test_slug_is_githubs():
    assert slug("Access: API keys, workspaces, scopes") == "access-api-keys-workspaces-scopes"
    assert slug("Fusion: RRF or linear") == "fusion-rrf-or-linear"
    assert slug("`POST /v1/search`") == "post-v1search"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path):
    broken = []
    for line in _outside_code(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("<"):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{target}: no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_readme_is_short_and_holds_no_history():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert not re.search(r"\bissues? \d+", text, re.I), "issue numbers belong in CHANGELOG.md"
    # the two commands, and a way into every reference page
    assert "make demo" in text and "make test" in text
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in text, f"README does not link docs/{page.name}"
