"""Direct calls into wgpu-native through wgpu-py's cffi handles, for the hot loops.

wgpu-py's methods check and convert their arguments and allocate a C array for each
`set_bind_group`; for a dispatch that is about three times the cost of the C calls
themselves. The flush loop (device.py) and replay (capture.py) call the C functions
with the `_internal` handles of wgpu-py objects instead. The Python objects stay
referenced by the caller for as long as the recorded commands may use them.

Errors: wgpu-native reports validation errors through the device's uncaptured-error
callback, which wgpu-py routes to its ErrorHandler. `Captured` opens a capture slot on
that handler around a batch of raw calls and turns whatever arrived into a GpuError,
so a bad raw call fails like a bad method call would.
"""

from __future__ import annotations

from .errors import GpuError

try:  # wgpu-py's own backend; absent only if wgpu changes its layout
    from wgpu.backends.wgpu_native import _api as _wgpu_api
    from wgpu.backends.wgpu_native import ffi, lib

    set_pipeline = lib.wgpuComputePassEncoderSetPipeline
    set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
    dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
    _error_handler = _wgpu_api.error_handler
    AVAILABLE = all(callable(f) for f in (set_pipeline, set_bind_group, dispatch)) and hasattr(
        _error_handler, "capture") and hasattr(_error_handler, "release")
except (ImportError, AttributeError):  # pragma: no cover - fall back to wgpu-py's methods
    ffi = lib = set_pipeline = set_bind_group = dispatch = _error_handler = None
    AVAILABLE = False

_SLOT = "anygpu-raw-calls"


def offset_table(slot_bytes: int, count: int):
    """C uint32 dynamic offsets 0, slot, 2*slot, ... and one pointer per entry (made
    once, so a dispatch passes a ready pointer and allocates nothing)."""
    table = ffi.new("uint32_t[]", [i * slot_bytes for i in range(count)])
    return table, [table + i for i in range(count)]


class Captured:
    """`with Captured(where):` raises GpuError for any wgpu error reported inside."""

    __slots__ = ("where",)

    def __init__(self, where: str):
        self.where = where

    def __enter__(self):
        _error_handler.capture(_SLOT)
        return self

    def __exit__(self, exc_type, exc, tb):
        error = _error_handler.release(_SLOT)
        if error is not None and exc_type is None:
            kind, message = error
            raise GpuError(f"{kind} on {self.where}: {message}")
        return False
