"""Refindery's pipelines, written over `indexes` (storage) and `models` (learned models)."""
