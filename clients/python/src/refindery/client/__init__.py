"""The Python client of a Refindery server (`pip install refindery-client`; no engine parts).

    from refindery.client import Client
    with Client("http://127.0.0.1:8000") as rf:
        for hit in rf.search("how do I pretty-print JSON", k=5).pages:
            print(hit.rank, hit.title, hit.url)

`Client` is synchronous, `AsyncClient` the same methods awaited. Replies are typed (refindery.client.models,
checked against the server's OpenAPI schema by the repository's tests); errors are typed exceptions
carrying the server's `detail.type` (refindery.client.errors). Requests are retried with backoff only
on 429, 503 and connection errors, never on another 4xx.
"""
from .errors import (Forbidden, Invalid, NotFound, RateLimited, RefinderyError, ServerError, Unauthorized,
                     Unavailable)
from .sync import AsyncClient, Client

__all__ = ["Client", "AsyncClient", "RefinderyError", "NotFound", "Invalid", "Unavailable", "Unauthorized",
           "Forbidden", "RateLimited", "ServerError"]
