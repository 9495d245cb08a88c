"""Device choice in one place: "auto" means CUDA when torch sees a GPU, else CPU."""
from __future__ import annotations


class DeviceUnavailable(RuntimeError):
    pass


def torch_build() -> str:
    """This torch and the CUDA it was built for ("2.13.0+cpu, a CPU-only build")."""
    import torch

    cuda = getattr(torch.version, "cuda", None)
    return f"torch {torch.__version__}, " + (f"built for CUDA {cuda}" if cuda else "a CPU-only build")


def resolve_device(requested: str = "auto") -> str:
    import torch

    req = (requested or "auto").strip().lower()
    if req == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if req == "cpu":
        return "cpu"
    if req == "cuda" or (req.startswith("cuda:") and req[5:].isdigit()):
        if not torch.cuda.is_available():
            raise DeviceUnavailable(f"device {requested!r} asked for, but torch sees no CUDA device "
                                    f"({torch_build()})")
        if ":" in req and int(req[5:]) >= torch.cuda.device_count():
            raise DeviceUnavailable(f"device {requested!r} asked for, but torch sees "
                                    f"{torch.cuda.device_count()} CUDA device(s)")
        return req
    raise DeviceUnavailable(f"unknown device {requested!r}: use auto, cpu, cuda or cuda:N")


def device_report(requested: str = "auto") -> dict:
    """What the configured device resolves to on this host, or why it cannot: for status replies."""
    out = {"configured": requested, "build": torch_build()}
    try:
        return out | {"available": True, "resolved": resolve_device(requested)}
    except DeviceUnavailable as exc:
        return out | {"available": False, "reason": str(exc)}


def set_cpu_threads(n: int) -> None:
    """torch's intra-op threads for this process (0: leave torch's default, one per core). On a few
    cores, a server answering concurrent searches does more searches/s with 1: each request's query
    encoding then takes one core instead of every request's encoding spinning on all of them
    (bench/results/throughput.md); batch ingest is faster with more."""
    if n > 0:
        import torch

        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
