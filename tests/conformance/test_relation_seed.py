"""Every example of the relation-search seed, run as written against `make_client()`, printing
exactly what the seed prints. Examples that later issues finish (the compact reply, the brief
compiler, MCP) run too, as expected failures, so the day they pass is noticed."""
from __future__ import annotations

import contextlib
import io
import shutil

import pytest

from .seed import RELATION_SEED, SEEDS, load_examples

if not (SEEDS / RELATION_SEED).is_file():
    pytest.skip(f"the seed {RELATION_SEED} is not in {SEEDS} (a clone outside the workspace); "
                "tests/test_relations_*.py assert the same facts in their own words", allow_module_level=True)

EXAMPLES = load_examples()
LATER: list[tuple[str, str]] = []   # (a needle in an example's code, the issue that finishes it)


def _params():
    out = []
    for ex in EXAMPLES:
        marks = [pytest.mark.xfail(strict=True, reason=why) for needle, why in LATER if needle in ex.code][:1]
        out.append(pytest.param(ex, id=f"line{ex.line}", marks=marks))
    return out


def test_the_seed_has_its_examples():
    assert len(EXAMPLES) == 18
    assert all(ex.output for ex in EXAMPLES)


@pytest.mark.parametrize("example", _params())
def test_seed_example_prints_what_the_seed_prints(example):
    from docs.examples import make_client

    client = make_client()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(example.runnable_code(), f"seed:{example.line}", "exec"),
                 {"client": client, "__name__": "seed_example"})
    finally:
        client.corpus.close()
        shutil.rmtree(client.data_dir, ignore_errors=True)
    got = [line.rstrip() for line in out.getvalue().strip().split("\n")]
    want = [line.rstrip() for line in example.output.strip().split("\n")]
    assert got == want
