"""Device choice in one place: "auto" means CUDA when torch sees a GPU, else CPU."""
from __future__ import annotations


class DeviceUnavailable(RuntimeError):
    pass


def resolve_device(requested: str = "auto") -> str:
    import torch

    req = (requested or "auto").strip().lower()
    if req == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if req == "cpu":
        return "cpu"
    if req.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceUnavailable(f"device {requested!r} asked for, but torch sees no CUDA device")
        return req
    raise DeviceUnavailable(f"unknown device {requested!r}: use auto, cpu, cuda or cuda:N")
