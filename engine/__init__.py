"""Refindery's verbs, written over `indexes` (storage) and `models` (learned models), in wings:

core (settings, errors, access, urls, values, clock, query log, packs, the corpus), ingest, refind,
relations, evidence. Every wing may use core; relations and evidence may use refind; nothing else
crosses (checked by import-linter, see pyproject.toml). docs/architecture.md walks a request through
each verb.
"""
