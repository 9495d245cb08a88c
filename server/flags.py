"""Command-line flags derived from a request model: one flag per field, named after it (`max_rounds`
-> `--max-rounds`), typed from its annotation, documented by its description — so the CLI takes the
same parameters as the route, declared once (engine/refind/schema.py, engine/evidence/schema.py)."""
from __future__ import annotations

import argparse
import types
import typing
from typing import Literal, get_args, get_origin

from pydantic import BaseModel


def _bare(annotation):
    """The annotation without `| None` / Optional, and without Annotated's constraints (the request
    model checks those when it is built)."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            annotation = rest[0]
    if get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def flag_kwargs(annotation, description: str | None) -> dict | None:
    """argparse keyword arguments for a field of this type (None: no flag can carry it, e.g. a nested
    model or a union of kinds)."""
    t = _bare(annotation)
    help_ = (description or "").replace("%", "%%") or None
    if t is bool:
        return {"action": argparse.BooleanOptionalAction, "help": help_}
    if get_origin(t) is Literal:
        choices = list(get_args(t))
        return {"type": type(choices[0]), "choices": choices, "help": help_}
    if get_origin(t) is list:
        (inner,) = get_args(t) or (str,)
        kw = flag_kwargs(inner, description)
        if kw is None or kw.get("action"):
            return None
        return {**kw, "action": "append", "help": (help_ or "") + " (repeatable)"}
    if t in (int, float, str):
        return {"type": t, "help": help_}
    return None


def add_request_flags(parser: argparse.ArgumentParser, model: type[BaseModel], skip: tuple[str, ...] = (),
                      names: dict[str, list[str]] | None = None) -> list[str]:
    """A flag for every field of `model` but `skip` (`names`: other spellings for a field, the first
    one shown); every flag defaults to None, i.e. the field is left unset. Returns the fields given a flag."""
    names = names or {}
    out = []
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        kw = flag_kwargs(field.annotation, field.description)
        if kw is None:
            continue
        flags = names.get(name) or ["--" + name.replace("_", "-")]
        parser.add_argument(*flags, dest=name, default=None, **kw)
        out.append(name)
    return out


def request_values(args: argparse.Namespace, fields: list[str]) -> dict:
    """The fields the command line set (a field left unset keeps the model's or the settings' default)."""
    return {f: v for f in fields if (v := getattr(args, f, None)) is not None}
