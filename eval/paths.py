"""Where the evaluation data lives beside the checkout (`../shared/data`): named in a module of its own
so the command-line parser and the readers share them without importing each other (or the training code)."""
from __future__ import annotations

from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
# The supervised training data (SQuAD v1.1): eval/squad.py reads it, `refindery reranker train --squad`
# names it as the default.
DEFAULT_SQUAD_PATH = SHARED_DATA / "train" / "squad-v1.1-train.jsonl.gz"
