"""Extracting the runnable examples (code, then its printed output) from a seed document.

A seed is plain text: an example starts at a line beginning `from ` or `import ` after a blank
line; its code runs on for as long as the following blank-line-separated paragraphs still parse as
Python together, and the paragraph after the code is its printed output.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"
RELATION_SEED = "000_ffda9a0f1f9ceac1.txt"

# The seed's `epistem.*` imports, mapped to this product's modules.
IMPORT_MAP = [
    (re.compile(r"^from epistem\.bundles\.catalogue_loader import parse_relation_sections\n", re.M), ""),
    (re.compile(r"^from epistem\.bundles\.registry import load_registry_bundle\n", re.M),
     "from engine.relations.packs import load_pack\n"),
    (re.compile(r"^from epistem\.substrate\.search import ", re.M), "from engine.relations.compile import "),
    (re.compile(r'parse_relation_sections\(load_registry_bundle\("bundle_(\w+)"\)\)'), r'load_pack("\1")'),
]


@dataclass
class Example:
    index: int
    line: int          # 1-based line of the example's first code line in the seed
    heading: str       # the nearest preceding prose line, to name the example
    code: str
    output: str

    def runnable_code(self) -> str:
        code = self.code
        for pattern, repl in IMPORT_MAP:
            code = pattern.sub(repl, code)
        return code


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False


def paragraphs(text: str) -> list[tuple[int, str]]:
    out, start, buf = [], None, []
    for i, line in enumerate(text.split("\n"), 1):
        if line.strip() == "":
            if buf:
                out.append((start, "\n".join(buf)))
                buf = []
            continue
        if not buf:
            start = i
        buf.append(line)
    if buf:
        out.append((start, "\n".join(buf)))
    return out


def extract(text: str) -> list[Example]:
    paras = paragraphs(text)
    examples, i, heading = [], 0, ""
    while i < len(paras):
        line, para = paras[i]
        if not re.match(r"^(from|import) \S", para):
            heading = para.split("\n")[0][:80]
            i += 1
            continue
        j = i
        while j + 1 < len(paras) and _parses("\n\n".join(p for _, p in paras[i:j + 2])):
            j += 1
        code = "\n\n".join(p for _, p in paras[i:j + 1])
        output = paras[j + 1][1] if j + 1 < len(paras) else ""
        examples.append(Example(len(examples), line, heading, code, output))
        i = j + 2
    return examples


def load_examples(seed: str = RELATION_SEED) -> list[Example]:
    return extract((SEEDS / seed).read_text(encoding="utf-8"))
