"""The import graph has no circles: between modules, nor between folders (a folder's modules import
another's, which imports back). Imports under TYPE_CHECKING count: they are arrows a reader follows.
The layers and the wings are import-linter's contracts (pyproject.toml, run by `make test`)."""
import grimp

ROOTS = ("engine", "indexes", "models", "server", "eval")


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_circles_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def graph():
    g = grimp.build_graph(*ROOTS, exclude_type_checking_imports=False)
    mods = {m for m in g.modules if m.split(".")[0] in ROOTS}
    edges = {m: {t for t in g.find_modules_directly_imported_by(m) if t in mods and t != m} for m in mods}
    return mods, edges


def test_no_module_imports_back_into_a_circle():
    _, edges = graph()
    assert circles(edges) == []


def test_no_folder_imports_back_into_a_circle():
    mods, edges = graph()
    packages = {m for m in mods if any(x.startswith(m + ".") for x in mods)}

    def folder(m: str) -> str:
        return m if m in packages else m.rsplit(".", 1)[0]

    folders: dict[str, set[str]] = {folder(m): set() for m in mods}
    for m, targets in edges.items():
        for t in targets:
            a, b = folder(m), folder(t)
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                folders[a].add(b)
    assert circles(folders) == []


def test_the_cli_starts_without_importing_scikit_learn_or_scipy_stats():
    """Every CLI command imports the engine; scikit-learn (a stop-word list) and scipy.stats (one
    Kendall tau) cost it 2.5 s of its 3.5 s start, so they are imported where first used."""
    import subprocess
    import sys

    code = "import sys, server.cli; print(sorted(m for m in ('sklearn', 'scipy.stats') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
