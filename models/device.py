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


def set_cpu_threads(n: int) -> None:
    """torch's intra-op threads for this process (0: leave torch's default, one per core). On a few
    cores, a server answering concurrent searches does more searches/s with 1: each request's query
    encoding then takes one core instead of every request's encoding spinning on all of them
    (bench/results/throughput.md); batch ingest is faster with more."""
    if n > 0:
        import torch

        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
