"""Read your own writes across replicas, on the wire: every reply says the store generation this
process has applied (`Refindery-Generation`, a write's reply counting the write itself), and a request
that sends one back (`Refindery-Min-Generation: <g>`) — to whichever replica the balancer picks — is
held until that replica has applied g, at most `[store] catch_up_wait_s`, then refused with a typed
503 `not_caught_up` (Retry-After: 1) — after the key check, and only so many at once (`Generations`). A replica's replies also name it (`Refindery-Replica`). One process over a DuckDB store has applied whatever it
committed: the wait there is a comparison."""
from __future__ import annotations

import anyio
import anyio.to_thread

from .auth import SCOPE_KEY, refuse

GENERATION = b"refindery-generation"
REPLICA = b"refindery-replica"
MIN_GENERATION = "refindery-min-generation"
MAX_DIGITS = 18


class Waiters:
    """The requests waiting for a generation now, per key id (/healthz says how many in all)."""

    def __init__(self):
        self.per_key: dict[str | None, int] = {}

    def count(self) -> int:
        return sum(self.per_key.values())


class Generations:
    """Honoured only on a request the key check let through (it runs inside KeyAuth, which puts the
    grant in the scope): a request with no key, or a bad one, has had its 401 before any wait, and an
    open path (/healthz, the docs, the web page) ignores the header. Waits are bounded: at most
    `[store] catch_up_max_waiters` at once on this replica and `catch_up_max_waiters_per_key` for one
    key, each on a thread limiter of their own (never the threads the routes run on); past either cap
    a request is refused at once with 503 not_caught_up."""

    def __init__(self, app, engine_of, waiters: "Waiters"):
        self.app = app
        self.engine_of = engine_of   # () -> the Engine, once the app's lifespan has built it
        self._limiter: anyio.CapacityLimiter | None = None
        self._per_key = waiters.per_key   # key id (None: no key) -> its requests waiting now

    def waiting(self) -> int:
        return sum(self._per_key.values())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        engine = self.engine_of()
        if engine is None:
            return await self.app(scope, receive, send)
        wanted = None
        grant = scope.get(SCOPE_KEY)
        if grant is not None:   # the key check let it through (an open path has no grant: no wait)
            for k, v in scope.get("headers", []):
                if k.decode("latin-1").lower() == MIN_GENERATION:
                    wanted = v.decode("latin-1").strip()
        if wanted is not None:
            refused = await self._wait(engine, wanted, grant.key_id, send)
            if refused:
                return None
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

    async def _wait(self, engine, wanted: str, key: str | None, send) -> bool:
        """Wait for the generation asked for; True when the request was refused (422 or 503)."""
        # ASCII digits only: str.isdigit() also takes superscripts and other scripts' digits, int() not
        if not (wanted.isascii() and wanted.isdigit()) or len(wanted) > MAX_DIGITS:
            await refuse(send, 422, {
                "type": "validation_error", "title": "Refindery-Min-Generation is not a generation",
                "errors": [{"loc": ["header", "Refindery-Min-Generation"], "msg": "a whole number, as a "
                            "Refindery-Generation reply header gives it", "type": "int_parsing"}]})
            return True
        generation = int(wanted)
        st = engine.settings.store
        if engine.applied_generation() >= generation:   # applied already: no wait, no cap
            return False
        cap, per_key = st.catch_up_max_waiters, st.catch_up_max_waiters_per_key
        if self._limiter is None or self._limiter.total_tokens != max(cap, 1):
            self._limiter = anyio.CapacityLimiter(max(cap, 1))
        mine = self._per_key.get(key, 0)
        full = self.waiting() >= cap or self._limiter.borrowed_tokens >= cap
        if full or mine >= per_key:
            await self._not_caught_up(engine, send, generation, 0.0,
                                      "too many requests wait for a generation on this replica" if full else
                                      "this key has too many requests waiting for a generation")
            return True
        self._per_key[key] = mine + 1
        try:
            ok = await anyio.to_thread.run_sync(engine.wait_applied, generation, st.catch_up_wait_s,
                                                limiter=self._limiter)
        finally:
            left = self._per_key.get(key, 1) - 1
            if left > 0:
                self._per_key[key] = left
            else:
                self._per_key.pop(key, None)
        if not ok:
            await self._not_caught_up(engine, send, generation, st.catch_up_wait_s, None)
            return True
        return False

    @staticmethod
    async def _not_caught_up(engine, send, generation: int, wait_s: float, reason: str | None) -> None:
        title = (f"{reason}: send the request again (to any replica)" if reason else
                 f"this replica has not applied generation {generation} within {wait_s:g} s: "
                 "send the request again (to any replica)")
        await refuse(send, 503, {"type": "not_caught_up", "title": title, "min_generation": generation,
                                 "applied_generation": engine.applied_generation(),
                                 **({"reason": reason} if reason else {})},
                     headers=[(b"retry-after", b"1")])
