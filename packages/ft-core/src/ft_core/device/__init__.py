"""Where the expert cache's slots live and how work is queued on it (streams, events, memory):
one interface, a CPU stand-in (threads) and CUDA (torch.cuda streams). ``for_name`` picks one."""

from __future__ import annotations

from ft_core.device.streams import CpuDevice, Device, Event, Graph, Stream, done


def for_name(name: str, delay: float | None = None) -> Device:
    """The Device for a torch device string: "cpu" -> CpuDevice (``delay``: random copy-stream
    delays, for tests), "cuda" / "cuda:N" -> CudaDevice."""
    if name == "cpu":
        return CpuDevice(delay=delay)
    if name.startswith("cuda"):
        from ft_core.device.cuda import CudaDevice

        return CudaDevice(name)
    raise ValueError(f"device {name!r} is not one of cpu, cuda, cuda:N")


__all__ = ["CpuDevice", "Device", "Event", "Graph", "Stream", "done", "for_name"]
