"""Read your own writes across replicas, on the wire: every reply says the store generation this
process has applied (`Refindery-Generation`, a write's reply counting the write itself), and a request
that sends one back (`Refindery-Min-Generation: <g>`) — to whichever replica the balancer picks — is
held until that replica has applied g, at most `[store] catch_up_wait_s`, then refused with a typed
503 `not_caught_up` (Retry-After: 1). A replica's replies also name it (`Refindery-Replica`). One process over a DuckDB store has applied whatever it
committed: the wait there is a comparison."""
from __future__ import annotations

from starlette.concurrency import run_in_threadpool

from .auth import refuse

GENERATION = b"refindery-generation"
REPLICA = b"refindery-replica"
MIN_GENERATION = "refindery-min-generation"
MAX_DIGITS = 18


class Generations:
    def __init__(self, app, engine_of):
        self.app = app
        self.engine_of = engine_of   # () -> the Engine, once the app's lifespan has built it

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        engine = self.engine_of()
        if engine is None:
            return await self.app(scope, receive, send)
        wanted = None
        for k, v in scope.get("headers", []):
            if k.decode("latin-1").lower() == MIN_GENERATION:
                wanted = v.decode("latin-1").strip()
        if wanted is not None:
            if not wanted.isdigit() or len(wanted) > MAX_DIGITS:
                return await refuse(send, 422, {
                    "type": "validation_error", "title": "Refindery-Min-Generation is not a generation",
                    "errors": [{"loc": ["header", "Refindery-Min-Generation"], "msg": "a whole number, as a "
                                "Refindery-Generation reply header gives it", "type": "int_parsing"}]})
            generation = int(wanted)
            wait_s = engine.settings.store.catch_up_wait_s
            if not await run_in_threadpool(engine.wait_applied, generation, wait_s):
                return await refuse(send, 503, {
                    "type": "not_caught_up",
                    "title": f"this replica has not applied generation {generation} within {wait_s:g} s: "
                             "send the request again (to any replica)",
                    "min_generation": generation, "applied_generation": engine.applied_generation()},
                    headers=[(b"retry-after", b"1")])

        replica = engine.replica_id()

        async def send_with_generation(message):
            if message["type"] == "http.response.start":
                try:
                    applied = engine.applied_generation()
                except Exception:   # noqa: BLE001 — a store gone at this moment: the reply goes without it
                    applied = None
                extra = [] if applied is None else [(GENERATION, str(applied).encode())]
                if replica is not None:   # which replica answered (behind a balancer)
                    extra.append((REPLICA, replica.encode()))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_generation)
