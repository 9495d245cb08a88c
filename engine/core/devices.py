"""The configured device (`models.device`), checked wherever the engine loads a model: a host that
has not got it gives a typed refusal — 503 `device_unavailable` over HTTP and MCP, one line in the
CLI — never a traceback, and everything that needs no model on it keeps answering."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from models.device import DeviceUnavailable as NoSuchDevice

from engine.core.errors import DeviceUnavailable

REMEDY = ('set models.device = "auto" or "cpu" (REFINDERY_MODELS__DEVICE), or install torch\'s CUDA build '
          'on a host with a GPU (docs/operations.md, "CUDA")')


def device_refusal(exc: NoSuchDevice, requested: str) -> DeviceUnavailable:
    return DeviceUnavailable(f"{exc}: {REMEDY}", device=requested)


@contextmanager
def on_device(requested: str) -> Iterator[None]:
    try:
        yield
    except NoSuchDevice as exc:
        raise device_refusal(exc, requested) from exc
