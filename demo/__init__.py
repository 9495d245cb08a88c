"""The bundled demo: its corpus (pages.jsonl.gz), dictionary and the relation roster."""
