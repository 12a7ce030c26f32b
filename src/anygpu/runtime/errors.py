"""Exceptions raised by the runtime (re-exported as anygpu.GpuError)."""


class GpuError(RuntimeError):
    """A failure reported by the GPU or its driver: validation, out of memory, device lost."""


class LimitError(GpuError, ValueError):
    """A request over one of the adapter's limits, refused before any GPU call.

    Both a GpuError and a ValueError: it is bad input for this adapter."""
