"""The web page's modules call down (issue 71, item 3): dom.js and api.js below everything, nav.js for
the views to navigate by, router.js above the views — and no import circle anywhere. Before, router.js
and the views imported each other, and api.js and key_dialog.js did."""
from __future__ import annotations

import re
from pathlib import Path

WEB = Path(__file__).resolve().parents[2] / "server" / "web"
IMPORT = re.compile(r"""^\s*import\s+(?:[^"']*?\s+from\s+)?["'](\.{1,2}/[^"']+)["']""", re.M)


def graph() -> dict[str, set[str]]:
    out = {}
    for f in sorted(WEB.rglob("*.js")):
        name = f.relative_to(WEB).as_posix()
        out[name] = {(f.parent / m).resolve().relative_to(WEB).as_posix() for m in IMPORT.findall(f.read_text())}
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    found, path, state = [], [], {}

    def visit(n):
        state[n] = "open"
        path.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == "open":
                found.append(path[path.index(m):] + [m])
            elif m not in state:
                visit(m)
        path.pop()
        state[n] = "done"

    for n in sorted(g):
        if n not in state:
            visit(n)
    return found


def test_every_import_names_a_module_that_exists():
    g = graph()
    assert {"app.js", "router.js", "nav.js", "api.js", "views/search.js"} <= set(g)
    assert [(n, m) for n, deps in g.items() for m in deps if m not in g] == []


def test_no_import_circle_and_the_views_never_import_the_router():
    g = graph()
    assert cycles(g) == []
    assert [n for n, deps in g.items() if n.startswith("views/") and "router.js" in deps] == []
    assert g["api.js"] <= {"dom.js"} and g["dom.js"] == set()
