"""Test-only fault injection: SIGKILL this process at a named point, so a crash test hits every
window on purpose (REFINDERY_TEST_CRASH_AT=<point>; tests/ingest/test_crash.py, test_relations_loads.py,
test_relations_documents.py, test_relations_replicas.py, test_evidence_rounds.py). Unset, a call is one dictionary lookup."""
from __future__ import annotations

import os
import signal

CRASH_ENV = "REFINDERY_TEST_CRASH_AT"


def maybe_crash(point: str) -> None:
    """Kill this process now when REFINDERY_TEST_CRASH_AT names `point`."""
    if os.environ.get(CRASH_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
