"""Direct C calls through the runtime's cffi handles (wgpu-py's for wgpu-native, wgpudawn's
for Dawn: both expose webgpu.h), for the hot loops.

wgpu-py's methods check and convert their arguments and allocate a C array for each
`set_bind_group`; for a dispatch that is about three times the cost of the C calls
themselves. The flush loop (device.py) and replay (capture.py) call the C functions
with the `_internal` handles of wgpu-py objects instead. The Python objects stay
referenced by the caller for as long as the recorded commands may use them.

Errors: both runtimes report validation errors through the device's uncaptured-error
callback into their ErrorHandler. wgpu-native's has capture slots: `Captured` opens one
around a batch of raw calls and turns whatever arrived into a GpuError. Dawn's raises
pending errors at the next checked call and defers a pass encoder's errors to
`encoder.finish()` (which raises): there `Captured` raises what is pending at its end. So
a bad raw call fails like a bad method call would, on either runtime.

The names below (`AVAILABLE`, `ffi`, `lib`, `set_pipeline`, `set_bind_group`, `dispatch`,
`poll`) are bound on first use, once the runtime is chosen (runtime/webgpu.py).
"""

from __future__ import annotations

from .errors import GpuError

_SLOT = "anygpu-raw-calls"
_LAZY = ("AVAILABLE", "ffi", "lib", "set_pipeline", "set_bind_group", "dispatch", "poll", "_error_handler",
         "RUNTIME")


def _bind() -> None:
    """Set the module's C handles for the chosen runtime."""
    from .webgpu import current

    runtime = current().name
    handles: dict = dict.fromkeys(_LAZY)
    handles["AVAILABLE"] = False
    handles["RUNTIME"] = runtime
    try:
        if runtime == "dawn":
            from wgpudawn.backends.dawn import _api
            from wgpudawn.backends.dawn._helpers import get_wgpu_instance
            ffi, lib = _api.ffi, _api.lib
            process_events = lib.wgpuInstanceProcessEvents

            def poll(device) -> None:  # callbacks of finished work (AllowProcessEvents) run here
                process_events(get_wgpu_instance())
        else:
            from wgpu.backends.wgpu_native import _api  # type: ignore[no-redef]
            ffi, lib = _api.ffi, _api.lib
            device_poll = lib.wgpuDevicePoll

            def poll(device) -> None:
                device_poll(device._internal, False, ffi.NULL)
        handles.update(ffi=ffi, lib=lib, poll=poll, _error_handler=_api.error_handler,
                       set_pipeline=lib.wgpuComputePassEncoderSetPipeline,
                       set_bind_group=lib.wgpuComputePassEncoderSetBindGroup,
                       dispatch=lib.wgpuComputePassEncoderDispatchWorkgroups)
        handler = handles["_error_handler"]
        errors_reachable = (hasattr(handler, "capture") and hasattr(handler, "release")) if runtime == "wgpu" \
            else isinstance(getattr(handler, "pending", None), list)
        handles["AVAILABLE"] = errors_reachable and all(
            callable(handles[f]) for f in ("set_pipeline", "set_bind_group", "dispatch"))
    except (ImportError, AttributeError):  # pragma: no cover - fall back to wgpu-py's methods
        pass
    globals().update(handles)


def __getattr__(name: str):
    if name in _LAZY:
        _bind()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def offset_table(slot_bytes: int, count: int):
    """C uint32 dynamic offsets 0, slot, 2*slot, ... and one pointer per entry (made
    once, so a dispatch passes a ready pointer and allocates nothing)."""
    if "ffi" not in globals():
        _bind()
    table = globals()["ffi"].new("uint32_t[]", [i * slot_bytes for i in range(count)])
    return table, [table + i for i in range(count)]


class Captured:
    """`with Captured(where):` raises GpuError for any wgpu error reported inside."""

    __slots__ = ("where",)

    def __init__(self, where: str):
        self.where = where

    def __enter__(self):
        bound = globals()
        if "_error_handler" not in bound:
            _bind()
        if bound["RUNTIME"] == "wgpu":
            bound["_error_handler"].capture(_SLOT)
        return self

    def __exit__(self, exc_type, exc, tb):
        bound = globals()
        handler = bound["_error_handler"]
        if bound["RUNTIME"] == "wgpu":
            error = handler.release(_SLOT)
        else:
            pending = handler.pending
            error = pending[0] if pending else None
            if pending:
                for _, message in pending[1:]:
                    handler.log_error(message)
                pending.clear()
        if error is not None and exc_type is None:
            kind, message = error
            raise GpuError(f"{kind} on {self.where}: {message}")
        return False
