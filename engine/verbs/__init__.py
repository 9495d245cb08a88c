"""The Engine's verbs, one module per face's concern (refind, pages, relations, evidence, access,
operations), each a class the `Engine` (engine/app.py) is composed of. Every verb takes its caller
and does its own workspace defaulting (`Verbs.workspace_for`) and scoping."""
