"""The roster the seed's examples run against (its data lives in demo/roster.py, where the CLI's
`relations demo` reads it too).

`roster(client)` writes the warehouse export as a DuckDB file (tables people, roles, screenings,
screened), creates a workspace with the expert_network pack through the public API and loads the
export into it with one SQL load. The export records no display names.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from demo.roster import LOAD, PEOPLE, ROLES, SCREENED, SCREENINGS, write_export  # noqa: F401


@dataclass
class Roster:
    workspace_id: str
    source: str
    load: dict = field(default_factory=dict)


def roster(client) -> Roster:
    """Create a workspace over the public API and load the roster into it from SQL tables."""
    base = getattr(client, "data_dir", None) or Path(tempfile.mkdtemp(prefix="roster-"))
    source = Path(base) / "sources" / "roster-warehouse.duckdb"
    if not source.exists():
        write_export(source)
    r = client.post("/v1/public/workspaces", json={"name": "roster", "packs": ["expert_network"]})
    if r.status_code != 201:
        raise RuntimeError(f"creating the workspace failed: {r.status_code} {r.text}")
    ws = r.json()["workspace_id"]
    r = client.post(f"/v1/public/workspaces/{ws}/loads", json={"source": str(source), **LOAD})
    if r.status_code != 201:
        raise RuntimeError(f"loading the roster failed: {r.status_code} {r.text}")
    return Roster(ws, str(source), r.json())
