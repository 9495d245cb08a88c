"""The house's numbers (issue 44 asks for them in each step's note): README lines, the largest files,
functions over 60 lines, the files above indexes/ that name the Milvus backend, and the places that
name the default workspace — over engine/, indexes/, models/, server/ and eval/. Issue 56's limits too:
every file over 400 lines, class over 300 and function over 60; the corpus's reach-throughs (code
outside `engine/core/corpus.py` reaching a service's member through the corpus, `corpus.store.x` —
settings, a value rather than a service, not counted); and the workspace-defaulting sites (calls of
`workspace_for`, and code naming `default_workspace` outside its setting).

    .venv/bin/python bench/house.py [ROOT]      # ROOT: a checkout (default: this one)
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

PACKAGES = ("engine", "indexes", "models", "server", "eval")


def numbers(root: Path) -> dict:
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    texts = {p: p.read_text() for p in files}
    sizes = sorted(((len(t.splitlines()), str(p.relative_to(root))) for p, t in texts.items()), reverse=True)
    long_functions = []
    for p, t in texts.items():
        for node in ast.walk(ast.parse(t)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long_functions.append((node.end_lineno - node.lineno + 1, f"{p.relative_to(root)}:{node.name}"))
    code = {p: [ln for ln in t.splitlines() if not ln.strip().startswith("#")] for p, t in texts.items()}
    classes = []
    reach: dict[str, int] = {}
    for p, t in texts.items():
        rel = str(p.relative_to(root))
        tree = ast.parse(t)
        aliases = _corpus_aliases(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 300:
                classes.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.name}"))
            if rel != "engine/core/corpus.py" and _reaches(node, aliases):
                reach[rel] = reach.get(rel, 0) + 1
    defaulting = sum(len(re.findall(r"(?<!def )workspace_for\(", t)) for t in texts.values())
    defaulting += sum(1 for p, lines in code.items() for ln in lines if "default_workspace" in ln
                      and not re.search(r"def default_workspace|default_workspace: str", ln))
    above = [p for p in files if not str(p.relative_to(root)).startswith("indexes/")]
    return {
        "readme_lines": len((root / "README.md").read_text().splitlines()),
        "largest_engine_files": [s for s in sizes if s[1].startswith("engine/")][:3],
        "largest_files": sizes[:3],
        "functions_over_60_lines": sorted(long_functions, reverse=True),
        "milvus_above_indexes": [str(p.relative_to(root)) for p in above
                                 if any(re.search(r"\bmilvus\b|Milvus", ln) for ln in code[p])],
        "default_workspace_places": sum(t.count("default_workspace") for t in texts.values()),
        "files_over_400": [s for s in sizes if s[0] > 400],
        "classes_over_300": sorted(classes, reverse=True),
        "corpus_reach_throughs": sum(reach.values()),
        "reach_throughs_by_file": sorted(((n, f) for f, n in reach.items()), reverse=True),
        "workspace_defaulting_sites": defaulting,
    }


def _is_corpus(expr: ast.AST, aliases: set[str]) -> bool:
    return (isinstance(expr, ast.Name) and expr.id in {"corpus", *aliases}) or (
        isinstance(expr, ast.Attribute) and expr.attr == "corpus")


def _corpus_aliases(tree: ast.AST) -> set[str]:
    """Names a module binds to the corpus (`c = self.corpus`, `corpus = service.corpus`): a reach
    through one of them is a reach through the corpus."""
    return {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _is_corpus(node.value, set())
            for t in node.targets if isinstance(t, ast.Name)}


def _reaches(node: ast.AST, aliases: set[str]) -> bool:
    """`corpus.<service>.<member>` or `<x>.corpus.<service>.<member>` (or through an alias of the
    corpus), the service not `settings`."""
    if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
        return False
    return _is_corpus(node.value.value, aliases) and node.value.attr != "settings"


if __name__ == "__main__":
    n = numbers(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    print(f"README lines: {n['readme_lines']}")
    print(f"largest engine files: {n['largest_engine_files']}")
    print(f"largest files: {n['largest_files']}")
    print(f"functions over 60 lines: {len(n['functions_over_60_lines'])}; longest {n['functions_over_60_lines'][:5]}")
    print(f"files above indexes/ naming Milvus outside comments: {n['milvus_above_indexes']}")
    print(f"places naming default_workspace: {n['default_workspace_places']}")
    print(f"files over 400 lines: {n['files_over_400']}")
    print(f"classes over 300 lines: {n['classes_over_300']}")
    print(f"functions over 60 lines: {n['functions_over_60_lines']}")
    print(f"corpus reach-throughs: {n['corpus_reach_throughs']}; by file {n['reach_throughs_by_file'][:8]}")
    print(f"workspace-defaulting sites: {n['workspace_defaulting_sites']}")
