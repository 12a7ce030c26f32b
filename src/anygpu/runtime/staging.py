"""Host staging for GPU -> host -> GPU round trips (MPI collectives), without Python copies.

A `HostStage` is a pair of persistent host-visible wgpu buffers of one size:

- ``download`` (MAP_READ | COPY_DST): GPU buffers are copied into it on the GPU;
- ``upload`` (MAP_WRITE | COPY_SRC): copied on the GPU into GPU buffers.

`Device.read` maps a fresh staging buffer through wgpu-py, copies the mapped bytes into a
bytearray and then into a numpy array, and `Device.write` stages the array once more inside
wgpu (``queue.write_buffer``). A stage instead maps both of its buffers through wgpu-native
directly (``wgpuBufferMapAsync`` / ``wgpuBuffer[Const]MappedRange`` via cffi) and hands the
mapped memory itself, as numpy views, to the caller's `work` -- then one
``copy_buffer_to_buffer`` takes the result back to the GPU. (MPI itself is not given the
mapped memory: MPICH's single-copy path cannot read driver-mapped pages, see `host_arrays`;
`work` copies once each way between the mappings and two persistent host arrays.)

Threads: `record_download`, `submit` and `record_upload` record GPU work and belong to the
thread that records everything else (the Device is not thread-safe). `exchange` may run on
another thread (anygpu.distributed's MPI worker): wgpu-native's map, poll and unmap are
thread-safe (Dawn's with the feature implicit-device-synchronization, which Device asks for
there; its poll is ``wgpuInstanceProcessEvents``, see native.py); a map request completes once the submissions that use the buffer are done, and
`exchange` polls without blocking (see `_wait_mapped`), so the recording thread keeps
submitting meanwhile (DistributedDataParallel reduces one bucket while backward is still
being recorded and run). Between `submit` and the end of `exchange` the stage's
buffers must not be used by recorded work; `record_upload` comes after `exchange`.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import Callable, TypeVar

import numpy as np

from . import native
from .errors import GpuError
from .webgpu import wgpu

__all__ = ["HostStage", "stage_for", "read_when_done", "AVAILABLE"]

T = TypeVar("T")



def _available() -> bool:
    return bool(native.AVAILABLE) and all(hasattr(native.lib, name) for name in (
        "wgpuBufferMapAsync", "wgpuBufferGetMappedRange", "wgpuBufferGetConstMappedRange", "wgpuBufferUnmap"))


def __getattr__(name: str):
    # AVAILABLE: whether host staging works on the chosen runtime (known once it is chosen).
    if name == "AVAILABLE":
        value = globals()["AVAILABLE"] = _available()
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_CALLBACK = "void(WGPUMapAsyncStatus, WGPUStringView, void *, void *)"
MAP_TIMEOUT = 600.0  # seconds a map may wait for the GPU before it counts as a lost device
# Stages kept per device by stage_for (one per size class), at most this many bytes in all.
CACHE_BYTES = 256 << 20
# Seconds between the polls of a map wait (HostStage._wait_mapped): the first pause, growing by
# a quarter per poll up to the last (a software adapter's GPU is the CPU: poll it less often).
POLL_SLEEP = 10e-6
POLL_SLEEP_MAX = 200e-6
POLL_SLEEP_MAX_CPU = 2e-3  # a software adapter: its "GPU" shares the cores with this polling
_slack = threading.local()


def _fine_timer_slack() -> None:
    """Let this thread's short sleeps be short: Linux rounds a sleep up by the thread's timer
    slack (50 us by default), which would dominate a 10 us poll interval. Once per thread;
    elsewhere (or without prctl) sleeps are just coarser."""
    if getattr(_slack, "done", False):
        return
    _slack.done = True
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK: 1 us
        except (OSError, AttributeError):
            pass


class _Mapping:
    """One buffer's map request through wgpu-native: its callback (kept alive) and status."""

    __slots__ = ("buffer", "mode", "status", "callback", "info", "__weakref__")

    def __init__(self, buffer, mode: int):
        self.buffer = buffer  # the wgpu-py GPUBuffer: owns the handle
        self.mode = mode
        self.status: int | None = None
        ref = weakref.ref(self)

        def done(status, _message, _user1, _user2):  # runs on whichever thread polls
            mapping = ref()
            if mapping is not None:
                mapping.status = int(status)

        self.callback = native.ffi.callback(_CALLBACK, done)
        self.info = native.ffi.new("WGPUBufferMapCallbackInfo *", {
            "mode": native.lib.WGPUCallbackMode_AllowProcessEvents, "callback": self.callback})

    def request(self, nbytes: int) -> None:
        self.status = None
        native.lib.wgpuBufferMapAsync(self.buffer._internal, self.mode, 0, nbytes, self.info[0])

    def view(self, nbytes: int, dtype) -> np.ndarray:
        lib = native.lib  # a buffer mapped for reading has only a const range on Dawn
        get = lib.wgpuBufferGetConstMappedRange if self.mode == lib.WGPUMapMode_Read else lib.wgpuBufferGetMappedRange
        pointer = get(self.buffer._internal, 0, nbytes)
        if pointer == native.ffi.NULL:
            raise GpuError("host staging: wgpu returned no mapped range")
        return np.frombuffer(native.ffi.buffer(native.ffi.cast("char *", pointer), nbytes), dtype=dtype)

    def unmap(self) -> None:
        native.lib.wgpuBufferUnmap(self.buffer._internal)


class HostStage:
    """Persistent download/upload buffers of `nbytes` on `dev` (see the module docstring).

    times: seconds of the last `exchange`: ``map`` (waiting for the GPU and the mapping) and
    ``work`` (the caller's function on the mapped memory, e.g. the MPI all-reduce)."""

    def __init__(self, dev, nbytes: int):
        if not _available():
            raise GpuError("host staging needs the runtime's C API (runtime/native.py)")
        self.dev = dev
        self.nbytes = -(-max(int(nbytes), 4) // 8) * 8  # maps move whole words; keep 8-byte granules
        usage = wgpu.BufferUsage
        self._download = _Mapping(dev._device.create_buffer(
            size=self.nbytes, usage=usage.MAP_READ | usage.COPY_DST), native.lib.WGPUMapMode_Read)
        self._upload = _Mapping(dev._device.create_buffer(
            size=self.nbytes, usage=usage.MAP_WRITE | usage.COPY_SRC), native.lib.WGPUMapMode_Write)
        dev.stage_buffers.update((self._download.buffer, self._upload.buffer))
        self._lock = threading.Lock()  # one exchange at a time
        self.times = {"map": 0.0, "work": 0.0}
        self._host: dict = {}

    def __repr__(self) -> str:
        return f"HostStage({self.nbytes} bytes on {self.dev.adapter_name})"

    # ------------------------------------------------------------------ recording thread

    def _check(self, what: str, src_offset: int, dst_offset: int, nbytes: int, src_size: int, dst_size: int):
        if min(src_offset, dst_offset, nbytes) < 0 or src_offset + nbytes > src_size or dst_offset + nbytes > dst_size \
                or (src_offset | dst_offset | nbytes) % 4:
            raise ValueError(f"{what}: {nbytes} bytes from {src_offset} (of {src_size}) to {dst_offset} "
                             f"(of {dst_size}) is out of bounds or not on 4-byte words")

    def record_download(self, buf, offset: int = 0, n: int | None = None, src_offset: int = 0) -> None:
        """Record a GPU copy of n elements of Buffer `buf` (from element src_offset) into the
        download buffer at byte `offset`."""
        size = buf.itemsize
        nbytes = (buf.len - src_offset if n is None else int(n)) * size
        gpu_buffer = buf._gpu  # realizes deferred work (ops/fusion.py) before the copy is recorded
        self._check("host staging download", src_offset * size, offset, nbytes, -(-buf.nbytes // 4) * 4,
                    self.nbytes)
        if nbytes:
            self.dev._pending.append(("copy", gpu_buffer, src_offset * size, self._download.buffer, offset, nbytes))
            self.dev._maybe_flush()

    def clear_download(self) -> None:
        """Record zeros into the whole download buffer (for ranges no copy fills)."""
        self.dev._pending.append(("clear", self._download.buffer, self.nbytes))

    def submit(self) -> None:
        """Submit everything recorded so far: `exchange` maps after the recorded downloads
        (a map request waits for the submissions that use the buffer)."""
        self.dev.flush()

    def record_upload(self, buf, offset: int = 0, n: int | None = None, dst_offset: int = 0) -> None:
        """Record a GPU copy from the upload buffer at byte `offset` into n elements of Buffer
        `buf` (from element dst_offset). Only after `exchange` has returned."""
        size = buf.itemsize
        nbytes = (buf.len - dst_offset if n is None else int(n)) * size
        gpu_buffer = buf._gpu
        self._check("host staging upload", offset, dst_offset * size, nbytes, self.nbytes, -(-buf.nbytes // 4) * 4)
        if nbytes:
            self.dev._pending.append(("copy", self._upload.buffer, offset, gpu_buffer, dst_offset * size, nbytes))
            self.dev._maybe_flush()

    def host_arrays(self, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
        """Two plain host arrays of the stage's size (made once per dtype). MPI's single-copy
        transfer between processes (CMA: process_vm_readv) cannot read driver-mapped memory
        (EFAULT with NVIDIA's driver), so collectives copy the mapped bytes through these."""
        key = np.dtype(dtype)
        arrays = self._host.get(key)
        if arrays is None:
            count = self.nbytes // key.itemsize
            arrays = self._host[key] = (np.empty(count, key), np.empty(count, key))
        return arrays

    # ------------------------------------------------------------------ any thread

    def exchange(self, work: Callable[[np.ndarray, np.ndarray], T], dtype=np.float32) -> T:
        """Map both buffers once the submitted downloads are done, call work(download, upload)
        on numpy views of the mapped memory (valid only inside `work`), unmap, return its result."""
        lib = native.lib
        with self._lock:
            started = time.perf_counter()
            self._download.request(self.nbytes)
            self._upload.request(self.nbytes)
            self._wait_mapped(started + MAP_TIMEOUT)
            mapped = time.perf_counter()
            try:
                for mapping in (self._download, self._upload):
                    if mapping.status != lib.WGPUMapAsyncStatus_Success:
                        raise GpuError(f"host staging: mapping failed on {self.dev.adapter_name} "
                                       f"(status {mapping.status})")
                result = work(self._download.view(self.nbytes, dtype), self._upload.view(self.nbytes, dtype))
            finally:
                for mapping in (self._download, self._upload):
                    if mapping.status == lib.WGPUMapAsyncStatus_Success:
                        mapping.unmap()
                    mapping.status = None
            self.times = {"map": mapped - started, "work": time.perf_counter() - mapped}
            return result

    def _wait_mapped(self, deadline: float) -> None:
        _poll_until(self.dev, lambda: self._download.status is not None and self._upload.status is not None,
                    deadline, self.times["map"])

    def close(self) -> None:
        """Destroy both buffers (the stage must not be in use)."""
        for mapping in (self._download, self._upload):
            self.dev.stage_buffers.discard(mapping.buffer)
            mapping.buffer.destroy()


def _poll_until(dev, done: Callable[[], bool], deadline: float, last_wait: float = 0.0) -> None:
    """Poll `dev` until done() (a map request has completed: the submitted work using its
    buffer is done). last_wait: seconds the previous such wait took (slept first, mostly).

    Non-blocking polls with short sleeps, never ``wgpuDevicePoll(wait=true)``: in
    wgpu-native 29 a waiting poll holds the device's fence lock for the whole wait, and
    ``queue.submit`` needs that lock, so a worker thread waiting for a bucket's download
    would stop the recording thread from submitting the rest of backward until the GPU
    had run dry (gfx-rs/wgpu#9470, fixed after wgpu 29). The sleep grows from POLL_SLEEP
    to POLL_SLEEP_MAX (POLL_SLEEP_MAX_CPU on a software adapter) the longer the GPU takes,
    so short waits end within microseconds and long ones cost little CPU."""
    poll = native.poll
    device = dev._device
    _fine_timer_slack()
    # Every wake-up takes the GIL from the recording thread (which drops it at each C call):
    # sleep most of the last wait in one go, then poll finely.
    longest = POLL_SLEEP_MAX_CPU if dev.adapter_type == "CPU" else POLL_SLEEP_MAX
    if last_wait > 4 * POLL_SLEEP:
        time.sleep(min(0.7 * last_wait, 0.05))
    pause = POLL_SLEEP
    while not done():
        poll(device)
        if done():
            return
        if time.perf_counter() > deadline:
            raise GpuError(f"host staging: the GPU did not finish within {MAP_TIMEOUT:g} s "
                           f"on {dev.adapter_name}")
        time.sleep(pause)
        pause = min(pause * 1.25, longest)


def read_when_done(dev, buffer, nbytes: int) -> bytes:
    """The first `nbytes` of the MAP_READ wgpu buffer `buffer`, once the submitted work that
    writes it is done -- that work only: wgpu-py's ``map_sync`` waits through its poll thread
    with ``wgpuDevicePoll(wait=true)``, which returns when the whole queue has drained (so
    reading step k's loss after submitting step k+1 waited for step k+1 too, and the GPU
    then idled while the host prepared step k+2) and holds the lock other threads' submits
    need (see `_poll_until`). Polls without blocking instead, as HostStage does."""
    mapping = _Mapping(buffer, native.lib.WGPUMapMode_Read)
    mapping.request(nbytes)
    _poll_until(dev, lambda: mapping.status is not None, time.perf_counter() + MAP_TIMEOUT)
    if mapping.status != native.lib.WGPUMapAsyncStatus_Success:
        raise GpuError(f"read failed on {dev.adapter_name}: mapping failed (status {mapping.status})")
    try:
        return mapping.view(nbytes, np.uint8).tobytes()
    finally:
        mapping.unmap()


_stages: "weakref.WeakKeyDictionary[object, dict[int, HostStage]]" = weakref.WeakKeyDictionary()


def stage_for(dev, nbytes: int) -> HostStage:
    """A HostStage of at least `nbytes` on `dev`, reused by later calls of the same size class
    (at most CACHE_BYTES of stages are kept per device; the least recently used go first).
    For one-at-a-time round trips (anygpu.distributed's collectives on tensors)."""
    from .device import _size_class

    size = _size_class(max(int(nbytes), 8))
    cache = _stages.setdefault(dev, {})
    stage = cache.pop(size, None)
    if stage is None:
        stage = HostStage(dev, size)
    cache[size] = stage  # most recently used last
    while sum(2 * s.nbytes for s in cache.values()) > CACHE_BYTES and len(cache) > 1:
        dev.flush()  # recorded copies may still name the evicted stage's buffers
        cache.pop(next(iter(cache))).close()
    return stage
