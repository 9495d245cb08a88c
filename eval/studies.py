"""What the ranking studies (eval/ltr.py, eval/fusion_loo.py, eval/refind_bm25s.py) share: their
results written as `<stem>.json` and `<stem>.md` and the table printed."""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write(out: Path | str, stem: str, result: dict, md: str) -> int:
    out = Path(out)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{stem}.md").write_text(md)
    print(md)
    return 0
