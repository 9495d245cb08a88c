"""A brief compiled by ONE schema-constrained model call, then checked before anything runs.

The model is forced to call `compile_search_brief` (compile.py), whose input schema is the
workspace's address space; what it returns goes through `read_compile_output`, which keeps only
constraints attributable to whole words of the brief and lists what did not compile.
"""
from __future__ import annotations

from dataclasses import dataclass

from models.compiler import ChatCompletionsCompiler, CompilerFailed

from engine.core.errors import CompileFailed
from engine.relations.compile import Compiled, compile_tool, read_compile_output
from engine.relations.workspaces import Space

SYSTEM = (
    "You compile a search brief into constraints over a workspace's typed relations by calling the "
    "tool compile_search_brief exactly once. Write one constraint per condition the brief states, on "
    "the relation.slot that expresses it, with the brief's own words as `quote` and their [start, end) "
    "character offsets as `brief_span`. Use required: false only for what the brief calls a "
    "preference. Leave out anything no relation.slot can express: it is reported as not searched. "
    "When the brief pins the question to a month, give it as as_of (YYYY-MM)."
)


@dataclass
class BriefCompile:
    compiled: Compiled
    model: str
    usage: dict

    def as_dict(self) -> dict:
        c = self.compiled
        return {"brief": c.brief,
                "constraints": [{**k.as_constraint(),
                                 **({"span_relocated_from": list(k.span_relocated_from)}
                                    if k.span_relocated_from else {})} for k in c.constraints],
                "dropped": c.dropped, "uncompiled": c.uncompiled, "as_of": c.as_of,
                "model": self.model, "usage": self.usage}


def compile_brief(compiler: ChatCompletionsCompiler, brief: str, space: Space) -> BriefCompile:
    tool = compile_tool(space.schema, space.vocabulary)
    try:
        call = compiler.call(SYSTEM, brief, tool)
    except CompilerFailed as exc:
        raise CompileFailed(str(exc), compiler=compiler.describe()) from exc
    compiled = read_compile_output(brief, space.schema, space.vocabulary, call.arguments)
    return BriefCompile(compiled, call.model, call.usage)
