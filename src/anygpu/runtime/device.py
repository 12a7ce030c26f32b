"""The GPU device: adapter choice, buffer pool, pipeline and bind-group caches,
command recording and read-back. The only module family that imports wgpu.

Recording model: every launch appends a command to a pending list; the list is
turned into one command encoder (consecutive dispatches share one compute pass)
and submitted when the host needs a result (`read`, `synchronize`) or when
`MAX_PENDING` commands have accumulated. Small kernel parameters travel through
one uniform ring buffer bound with a dynamic offset, written once per submit.

Buffer reuse: a buffer freed while a batch is being recorded is "retired". It
may be handed out again at once to work recorded into the same batch (commands
in one command buffer run in order), but a host `write_buffer` (upload) only gets
buffers whose last use was already submitted: queue order then puts the write
after every earlier use. At each submit the retired buffers join the free list.

Gates (`Device.gate`): a command that holds back everything recorded after it until a
host-side condition is met (DistributedDataParallel: the MPI all-reduce of a bucket has
written the upload buffer that the next commands copy from). Until then the batch is not
submitted at `MAX_PENDING` but keeps growing (up to `HELD_MAX`), so Python records the
optimizer step and the next forward while the reduction runs; a flush that must submit
(a read, a host write, `synchronize`, a full ring) submits the commands before the gate,
waits for it, then submits the rest.

Deferred elementwise work (ops/fusion.py): a Buffer may hold a pending expression
(`buf._lazy`) instead of contents. The device keeps those expressions in `_lazy`, in
creation order, and realizes all of them (`realize_lazy`) before anything else can
read or change memory: any other launch, copy, read, write, flush. Pending work thus
always sees its inputs as they were when it was asked for (`ANYGPU_FUSE=0`: no deferral).
"""

from __future__ import annotations

import os
import struct
from bisect import insort
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .dtypes import DTYPES, FROM_NUMPY, dtype_of, storage_numpy, to_host, to_storage
from . import native, shaders
from . import staging as host_staging
from . import webgpu
from .errors import GpuError, LimitError
from .params import pack as pack_params
from .webgpu import wgpu  # wgpu-native's or Dawn's module, as ANYGPU_RUNTIME chooses

# Commands recorded before a forced submit. Bounds host memory for the pending
# list and the uniform ring, and keeps the GPU busy while Python records more: a
# submit costs the host about as much as ten dispatches, and submitting every few
# hundred lets the GPU start on a long chain of small ops early.
MAX_PENDING = 256
# Commands a batch may grow to while a gate (Device.gate) holds it back, and so the
# uniform ring's slots: recording goes on behind an unresolved gate up to this many.
HELD_MAX = 4096
PARAM_SLOT_BYTES = 256  # one uniform slot per dispatch (kernels use at most 64 words)
WORKGROUPS_PER_DIM = 65535
MAX_BIND_GROUPS = 8192  # cached bind groups; the oldest goes first
# Pool policy (see Device._release_idle): every POOL_TRIM_EVERY submits, pooled buffers
# idle for POOL_IDLE_SUBMITS submits are destroyed, then the oldest idle ones while the
# pool holds more than Device.max_idle_bytes (env ANYGPU_POOL_MAX_IDLE_BYTES; default the
# larger of 1 GiB and 4 max-size buffers). An upload that finds no free buffer submits the
# batch once RETIRED_FLUSH_COUNT freed buffers wait on it, so they become reusable.
POOL_TRIM_EVERY = 64
POOL_IDLE_SUBMITS = 512
RETIRED_FLUSH_COUNT = 1024
# wgpu stages each queue.write_buffer in memory of its own until the next submit; this
# many host writes (or bytes) without one trigger a submit, so uploads alone stay bounded.
HOST_WRITES_PER_SUBMIT = 256
HOST_WRITE_BYTES_PER_SUBMIT = 64 << 20



def _buffer_order(gpu_buffer) -> int:
    """The pool's free lists are kept in this order, so `pop()` hands out the oldest wgpu
    buffer (wgpu-py's uid: creation order, never reused). A step that repeats the same work
    then gets the same buffers each time, whatever order its Buffers were freed in, and finds
    its bind groups cached (a new one per launch costs the host more than the launch)."""
    return -gpu_buffer._uid


def _size_class(nbytes: int) -> int:
    """Round a byte size up to a pool size class: powers of two with four steps
    between them (x1, x1.25, x1.5, x1.75), at least 256 bytes. Waste is under 25%."""
    if nbytes <= 256:
        return 256
    top = 1 << (nbytes - 1).bit_length()  # next power of two >= nbytes
    step = top // 8
    return -(-nbytes // step) * step


class Buffer:
    """A flat GPU array of `len` elements of `dtype` (f32, f16, i32, u32, bool; see
    runtime/dtypes.py), `itemsize` bytes each.

    The memory returns to the device's pool when the Buffer is garbage collected. A Buffer
    made by a deferred op (ops/fusion.py) holds a pending expression in `_lazy` and gets
    its memory when the device realizes it; `_gpu` (the wgpu buffer) realizes deferred work
    first, `_mem` (inside runtime/ only) does not.
    """

    __slots__ = ("len", "dtype", "_mem", "_size", "_dev", "_lazy", "__weakref__")

    def __init__(self, dev: "Device", gpu_buffer, size: int, length: int, dtype: str):
        self._dev = dev
        self._mem = gpu_buffer  # None until a deferred Buffer is realized
        self._size = size
        self.len = length
        self.dtype = dtype
        self._lazy = None  # the pending expression that will fill it (ops/fusion.py), if any

    @property
    def _gpu(self):
        """The wgpu buffer holding the contents. Code that takes it records its own commands
        on it (a copy in or out, runtime/staging.py, compiled.py): all deferred work is
        realized first, so whatever reads this buffer is recorded before a write to it."""
        dev = self._dev
        if dev is not None and dev._lazy:
            dev.realize_lazy()
        return self._mem

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def nbytes(self) -> int:
        return self.len * DTYPES[self.dtype].itemsize

    def __len__(self) -> int:
        return self.len

    def __repr__(self) -> str:
        return f"Buffer(len={self.len}, dtype={self.dtype})"

    def __del__(self):
        dev = self._dev
        if dev is not None and self._mem is not None:
            try:
                dev._retire(self._mem, self._size)
            except Exception:  # interpreter shutdown: nothing to return to
                pass
            self._mem = None


class _RawBindGroups:
    """Bind groups of a launch's Buffers made by one C call (wgpuDeviceCreateBindGroup, through
    runtime/native.py's cffi handles) instead of wgpu-py's `create_bind_group`, which checks
    and converts each entry dict and allocates a C struct per entry: a launch whose Buffers
    have no cached group paid several times the C call's cost for it. The descriptor and
    entries are the ones `create_bind_group` builds (binding 0 the parameter ring, then the
    inputs and outputs whole); the handle goes into the runtime's own GPUBindGroup object, which
    releases it. A call that reports an error is released and made again through
    `create_bind_group`, so the error is raised as before."""

    __slots__ = ("dev", "ffi", "create_group", "group_class", "ring", "entry_type", "desc_type",
                 "handler", "runtime")

    @classmethod
    def make(cls, dev: "Device") -> "_RawBindGroups | None":
        try:
            if native.RUNTIME == "dawn":
                from wgpudawn.backends.dawn import _api
            else:
                from wgpu.backends.wgpu_native import _api  # type: ignore[no-redef]
            ffi = native.ffi
            return cls(dev, ffi, native.lib.wgpuDeviceCreateBindGroup, _api.GPUBindGroup,
                       ffi.typeof("WGPUBindGroupEntry[]"), ffi.typeof("WGPUBindGroupDescriptor *"))
        except (ImportError, AttributeError, TypeError):  # pragma: no cover - wgpu-py's method then
            return None

    def __init__(self, dev, ffi, create_group, group_class, entry_type, desc_type):
        self.dev = dev
        self.ffi = ffi
        self.create_group = create_group
        self.group_class = group_class
        self.ring = dev._param_ring._internal
        self.entry_type = entry_type
        self.desc_type = desc_type
        self.handler = native._error_handler
        self.runtime = native.RUNTIME

    def create(self, layout, key: tuple, inputs, outputs):
        """The bind group, or None when the C call reported an error (the caller retries with
        wgpu-py's method). key[1:] are the Buffers' wgpu buffers, inputs then outputs."""
        n = len(key)
        entries = self.ffi.new(self.entry_type, n)
        entry = entries[0]
        entry.buffer = self.ring
        entry.size = PARAM_SLOT_BYTES
        i = 1
        for bufs in (inputs, outputs):
            for b in bufs:
                entry = entries[i]
                entry.binding = i
                entry.buffer = key[i]._internal
                entry.size = b._size
                i += 1
        desc = self.ffi.new(self.desc_type)  # label: the empty string view {NULL, 0}, as ""
        desc.layout = layout._internal
        desc.entryCount = n
        desc.entries = entries
        device = self.dev._device
        handler = self.handler
        if self.runtime == "wgpu":
            handler.capture("anygpu-bind-group")
            try:
                handle = self.create_group(device._internal, desc)
            finally:
                error = handler.release("anygpu-bind-group")
        else:  # Dawn: any pending error is raised by the next checked call, here the retry
            handle = self.create_group(device._internal, desc)
            error = bool(handler.pending)
        group = self.group_class("", handle, device)
        if error:
            del group  # releases the handle
            return None
        return group


@dataclass(frozen=True)
class Kernel:
    """A compiled compute pipeline and how to bind it.

    Binding 0 is the uniform parameter block (dynamic offset); bindings 1..n_in are
    read-only storage buffers, then n_out read-write storage buffers.
    """

    name: str
    pipeline: object
    layout: object
    n_in: int
    n_out: int
    param_struct: struct.Struct


class Device:
    """One WebGPU device on a chosen adapter. See the module docstring for the model."""

    def __init__(self, adapter: str | None = None, backend: str | None = None,
                 power_preference: str = "high-performance"):
        adapter = adapter if adapter is not None else os.environ.get("ANYGPU_ADAPTER") or None
        backend = backend if backend is not None else os.environ.get("ANYGPU_BACKEND") or None
        runtime = webgpu.current()
        # "wgpu" (wgpu-native) or "dawn", and why (runtime/webgpu.py: ANYGPU_RUNTIME).
        self.runtime: str = runtime.name
        self.runtime_reason: str = runtime.reason
        self._adapter = choose_adapter(adapter, backend, power_preference)
        info = self._adapter.info
        # Known when chosen by index: tells apart cards of the same name (None: look it up by info).
        self.adapter_index = int(adapter) if adapter and str(adapter).strip().isdigit() else None
        self.adapter_name: str = info.get("device") or info.get("description") or "unknown"
        self.backend: str = info.get("backend_type", "unknown")
        self.adapter_type: str = info.get("adapter_type", "unknown")
        self.driver: str = info.get("description", "")
        # anygpu's names (runtime/webgpu.py maps Dawn's): timestamp-query(-inside-passes),
        # subgroup, shader-f16; on Dawn also subgroup-matrix, implicit-device-synchronization.
        self.limits = dict(self._adapter.limits)
        try:
            self._device, granted = webgpu.open_device(
                self._adapter, webgpu.adapter_features(self._adapter), self.limits)
        except (wgpu.GPUError, RuntimeError) as exc:
            raise GpuError(f"could not open {self.adapter_name}: {exc}") from exc
        self.features = frozenset(granted)
        # Subgroup-matrix configs (Dawn): dicts with M, N, K, component_type, result_type,
        # min/max_subgroup_size and checked (the self-check's verdict; None: not checkable).
        self.matrix_configs: list[dict] = (webgpu.device_matrix_configs(self._adapter, self._device)
                                           if "subgroup-matrix" in self.features else [])
        self._queue = self._device.queue
        self.max_buffer_bytes = min(self.limits["max-buffer-size"],
                                    self.limits["max-storage-buffer-binding-size"])
        self.max_workgroup_storage = self.limits["max-compute-workgroup-storage-size"]
        # Every wgpu buffer of the pool, in use or not. A Buffer may die inside a reference
        # cycle (autograd graphs); the cyclic collector then finalizes everything only the
        # cycle reaches, which would release the wgpu buffer's handle while Buffer.__del__
        # hands it back to the pool. Held here, wgpu buffers never belong to such a cycle.
        self._owned: set = set()
        self._free: dict[int, list] = {}
        self._retired: dict[int, list] = {}
        self._retired_count = 0
        self._staged_writes = [0, 0]  # host writes, bytes since the last submit
        self._idle_since: dict = {}  # free wgpu buffer -> stats["submits"] when it became free
        self._submitting = False  # flush() is encoding a batch that self._pending no longer shows
        self._last_trim = 0
        self.max_idle_bytes = int(os.environ.get("ANYGPU_POOL_MAX_IDLE_BYTES") or 0) or max(
            1 << 30, 4 * self.max_buffer_bytes)
        self._staging: dict[int, list] = {}
        self._sizes: dict[tuple, int] = {}  # (elements, dtype) -> pool size class (see _size_of)
        self._kernels: dict[tuple, Kernel] = {}
        # Layer-0 modules' own lookups of their Kernels (ops/elementwise.py), keyed by the caller.
        self.op_kernels: dict = {}
        self._layouts: dict[tuple[int, int], tuple[object, object]] = {}
        self._bind_groups: dict[tuple, object] = {}  # (layout, *wgpu buffers) -> bind group, oldest first
        self._timestamps = None  # (query set, resolve buffer, mappable buffer), made on first use
        self._pending: list[tuple] = []
        self._gates: list = []  # the ready() functions of the gates in _pending
        self._deferred: Callable[[], None] | None = None  # a replay's held tail (defer)
        # Host-visible buffers of runtime.staging.HostStage: copies into them belong to a
        # captured step (unlike copies into read-back staging, which belong to reads).
        self.stage_buffers: set = set()
        align = self.limits["min-uniform-buffer-offset-alignment"]
        self._slot = -(-PARAM_SLOT_BYTES // align) * align
        self._params = bytearray(self._slot * HELD_MAX)
        self._n_params = 0
        self._param_ring = self._device.create_buffer(
            size=len(self._params), usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        # Dispatches are encoded by direct C calls (runtime/native.py) unless ANYGPU_RAW_CALLS=0.
        self._raw_calls = native.AVAILABLE and os.environ.get("ANYGPU_RAW_CALLS", "1") != "0"
        if self._raw_calls:
            self._offset_table, self._offset_ptrs = native.offset_table(self._slot, HELD_MAX)
        # Bind groups made by one direct C call (see _RawBindGroups) unless ANYGPU_RAW_CALLS=0.
        self._raw_groups = _RawBindGroups.make(self) if self._raw_calls else None
        self._recording = None  # a runtime.capture.Recording while a step is being captured
        self._pinned: dict = {}  # wgpu buffer -> number of captured steps that replay it
        self._orphans: dict = {}  # pinned wgpu buffer whose Buffer died -> its size class
        # Deferred elementwise expressions, oldest first (see the module doc), and the function
        # that realizes them (set by ops/fusion.py, which creates them). fuse: defer at all.
        self._lazy: list = []
        self._realizer = None
        self.fuse = os.environ.get("ANYGPU_FUSE", "1").strip() not in ("0", "false", "off", "no")
        # dispatches: real dispatches recorded. fused_ops: elementwise ops that ran inside
        # fused kernels of two or more ops; fused_kernels: those kernels (ops/fusion.py).
        self.stats = {"submits": 0, "dispatches": 0, "pipelines": 0, "buffers_created": 0,
                      "fused_ops": 0, "fused_kernels": 0}

    def __repr__(self) -> str:
        return f"Device({self.adapter_name!r}, backend={self.backend!r}, runtime={self.runtime!r})"

    def realize_lazy(self) -> None:
        """Record the kernels of every deferred elementwise expression now (see the module
        doc). Every launch, copy, read, write and flush calls it first."""
        lazy = self._lazy
        if lazy:
            self._lazy = []  # the realizer's own launches must not come back here
            self._realizer(self, lazy)

    # ------------------------------------------------------------------ buffers

    def _check_size(self, nbytes: int, what: str) -> None:
        if nbytes > self.max_buffer_bytes:
            limit = ("max-storage-buffer-binding-size"
                     if self.limits["max-storage-buffer-binding-size"] <= self.limits["max-buffer-size"]
                     else "max-buffer-size")
            raise LimitError(
                f"{what}: {nbytes} bytes requested, over the adapter's {limit} of "
                f"{self.max_buffer_bytes} bytes on {self.adapter_name}")

    def empty(self, n: int, dtype: str = "f32", stream_ordered: bool = True) -> Buffer:
        """A Buffer of n elements with undefined contents (for kernel outputs).

        stream_ordered=False when the host will write it directly (see module doc)."""
        n = int(n)
        size = self._sizes.get((n, dtype))
        if size is None:
            size = self._size_of(n, dtype)
        return Buffer(self, self._take(size, stream_ordered), size, n, dtype)

    def _size_of(self, n: int, dtype: str) -> int:
        """The pool size class of n elements of dtype, checked (remembered: `empty` is on the
        path of every op)."""
        if n < 0:
            raise ValueError(f"alloc: element count must be >= 0, got {n}")
        itemsize = self._dtype("alloc", dtype).itemsize
        nbytes = -(-max(n, 1) * itemsize // 4) * 4  # whole words: copies and clears move 4-byte units
        self._check_size(nbytes, "alloc")
        size = _size_class(nbytes)
        if size > self.max_buffer_bytes:
            size = -(-nbytes // 16) * 16
        if len(self._sizes) >= 4096:
            self._sizes.clear()
        self._sizes[(n, dtype)] = size
        return size

    def _attach(self, buf: Buffer) -> None:
        """Give a deferred op's Buffer (made without memory, ops/fusion.py) its memory when it
        is realized: stream-ordered, as `empty`."""
        size = self._sizes.get((buf.len, buf.dtype))
        if size is None:
            size = self._size_of(buf.len, buf.dtype)
        buf._mem = self._take(size, True)
        buf._size = size

    def _take(self, size: int, stream_ordered: bool):
        """A wgpu buffer of pool size class `size`: a freed one if possible (see module doc)."""
        # Stream order lets later work of the batch reuse a retired buffer, but not while a
        # tail is deferred: the tail may still write it, and work recorded now may be
        # submitted ahead of the tail (_submit_ahead).
        bucket = self._retired.get(size) if stream_ordered and self._deferred is None else None
        if not bucket:
            bucket = self._free.get(size)
            if not bucket and not stream_ordered and self._retired_count >= RETIRED_FLUSH_COUNT \
                    and self._retired.get(size):
                self.flush()  # a host write may not take a retired buffer; submitted, they are free
                bucket = self._free.get(size)
        if bucket:
            gpu_buffer = bucket.pop()
            self._idle_since.pop(gpu_buffer, None)
        else:
            gpu_buffer = self._create_buffer(size)
        if self._recording is not None:
            self._recording.created.add(gpu_buffer)
        return gpu_buffer

    def _create_buffer(self, size: int):
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        try:
            buf = self._device.create_buffer(size=size, usage=usage)
        except wgpu.GPUError as exc:
            # Out of memory: give the pool's idle memory back and try once more.
            self.trim()
            try:
                buf = self._device.create_buffer(size=size, usage=usage)
            except wgpu.GPUError as exc2:
                raise GpuError(f"alloc of {size} bytes failed on {self.adapter_name}: {exc2}") from exc
        self._owned.add(buf)
        self.stats["buffers_created"] += 1
        return buf

    def _retire(self, gpu_buffer, size: int) -> None:
        if self._pinned and gpu_buffer in self._pinned:  # a captured step still uses it (capture.py)
            self._orphans[gpu_buffer] = size
            return
        if not self._pending and not self._submitting and self._recording is None and self._deferred is None:
            # No recorded-but-unsubmitted command can use it, and queue order puts a host
            # write after every submitted use: free at once, not at the next flush (a loop
            # of uploads with no GPU work would otherwise make a new buffer each time). A
            # deferred tail may still write it (a replay's outputs): retired until submitted.
            insort(self._free.setdefault(size, []), gpu_buffer, key=_buffer_order)
            self._idle_since[gpu_buffer] = self.stats["submits"]
            return
        self._retired.setdefault(size, []).append(gpu_buffer)
        self._retired_count += 1

    def trim(self) -> None:
        """Destroy every idle pooled buffer (after a submit, so none is still in use)."""
        self.flush()
        for bucket in self._free.values():
            for gpu_buffer in bucket:
                self._forget_bind_groups(gpu_buffer)
                self._owned.discard(gpu_buffer)
                gpu_buffer.destroy()
        self._free.clear()
        self._idle_since.clear()

    def alloc(self, n: int, dtype: str = "f32") -> Buffer:
        """A zero-filled Buffer of n elements."""
        buf = self.empty(n, dtype)
        if n > 0:
            self._pending.append(("clear", buf._mem, buf.nbytes))  # a new buffer: nothing pending reads it
            self._maybe_flush()
        return buf

    def _dtype(self, op: str, name: str):
        """The DType called `name`, refused with a clear error where this adapter cannot
        hold it (f16 needs the 'shader-f16' feature)."""
        dtype = dtype_of(name, op)
        if dtype.storage == "f16" and "shader-f16" not in self.features:
            raise ValueError(f"{op}: float16 storage needs the adapter feature 'shader-f16', which "
                             f"{self.adapter_name} lacks; use float32")
        return dtype

    def supports(self, dtype: str) -> bool:
        """Whether Buffers of `dtype` (a runtime dtype name) can be made on this device."""
        return dtype in DTYPES and (DTYPES[dtype].storage != "f16" or "shader-f16" in self.features)

    def _write_words(self, gpu_buffer, arr: np.ndarray) -> None:
        if arr.nbytes % 4:  # write_buffer moves whole 4-byte words (odd-length f16)
            arr = np.concatenate([arr, np.zeros(1, arr.dtype)])
        if self._recording is not None:
            self._recording.write(gpu_buffer, arr.tobytes())
        self._queue.write_buffer(gpu_buffer, 0, arr)
        staged = self._staged_writes
        staged[0] += 1
        staged[1] += arr.nbytes
        if staged[0] >= HOST_WRITES_PER_SUBMIT or staged[1] >= HOST_WRITE_BYTES_PER_SUBMIT:
            if self._pending:
                self.flush()
            else:
                self._queue.submit([])  # hands wgpu's staged copies to the GPU and frees them
            staged[0] = staged[1] = 0

    def upload(self, data, dtype: str | None = None) -> Buffer:
        """Copy host data (list, tuple, numpy array) to a new Buffer (float32 unless
        the array is float16/int32/uint32/bool or dtype says otherwise). Flattens row-major."""
        arr = np.asarray(data)
        if dtype is None:
            dtype = FROM_NUMPY.get(arr.dtype, "f32")
        arr = to_storage(arr, self._dtype("upload", dtype))
        buf = self.empty(arr.size, dtype, stream_ordered=False)
        if arr.size:
            # Safe without flushing: a pooled buffer is only handed out after every
            # batch that used it was submitted, so this write is ordered after them.
            self._write_words(buf._mem, arr)
        return buf

    def write(self, buf: Buffer, data) -> None:
        """Overwrite a Buffer's contents from host data of the same element count."""
        arr = to_storage(np.asarray(data), DTYPES[buf.dtype])
        if arr.size != buf.len:
            raise ValueError(f"write: buffer has {buf.len} elements, data has {arr.size}")
        self.flush()  # earlier recorded (and deferred) work must see the old contents
        if arr.size:
            self._write_words(buf._gpu, arr)

    def copy(self, src: Buffer, dst: Buffer | None = None, n: int | None = None,
             src_offset: int = 0, dst_offset: int = 0) -> Buffer:
        """Copy n elements GPU-side (whole buffer by default) into dst (new if None)."""
        if self._lazy:
            self.realize_lazy()
        n = src.len - src_offset if n is None else int(n)
        if dst is None:
            dst = self.empty(n, src.dtype)
        if src_offset + n > src.len or dst_offset + n > dst.len or min(src_offset, dst_offset, n) < 0:
            raise ValueError(f"copy: range of {n} elements from {src_offset} (of {src.len}) "
                             f"to {dst_offset} (of {dst.len}) is out of bounds")
        if dst.itemsize != src.itemsize:
            raise ValueError(f"copy: {src.dtype} elements cannot be copied into a {dst.dtype} buffer")
        size = src.itemsize
        if n:
            nbytes = n * size
            if (src_offset * size) % 4 or (dst_offset * size) % 4 or (
                    nbytes % 4 and dst_offset + n != dst.len):
                raise ValueError(f"copy: {src.dtype} ranges must start and end on 4-byte words "
                                 f"(n={n}, src_offset={src_offset}, dst_offset={dst_offset}); "
                                 f"use strided_gather for other ranges")
            # The last odd f16 may carry its neighbour in the word: only the buffer's padding.
            self._pending.append(("copy", src._gpu, src_offset * size, dst._gpu, dst_offset * size,
                                  -(-nbytes // 4) * 4))
            self._maybe_flush()
        return dst

    def read(self, buf: Buffer) -> np.ndarray:
        """Copy a Buffer to the host: a 1-D numpy array of its dtype (submits pending work)."""
        if self._lazy:
            self.realize_lazy()
        dtype = DTYPES[buf.dtype]
        if buf.len == 0:
            self.flush()
            return np.zeros(0, dtype=dtype.host)
        nbytes = -(-buf.nbytes // 4) * 4  # copies and maps move whole words
        size = _size_class(nbytes)
        bucket = self._staging.setdefault(size, [])
        if bucket:
            staging = bucket.pop()
        else:
            staging = self._device.create_buffer(
                size=size, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        self._pending.append(("copy", buf._gpu, 0, staging, 0, nbytes))
        if self._recording is not None:
            self._recording.reads += 1
        self.flush()
        try:
            staging.map_sync(wgpu.MapMode.READ, 0, nbytes)
            data = staging.read_mapped(0, nbytes, copy=True)
            staging.unmap()
        except wgpu.GPUError as exc:
            raise GpuError(f"read failed on {self.adapter_name}: {exc}") from exc
        bucket.append(staging)
        return to_host(np.frombuffer(data, dtype=storage_numpy(dtype))[:buf.len].copy(), dtype)

    def read_later(self, buf: Buffer) -> "PendingRead":
        """Record a copy of `buf` to host-visible memory into the current batch and return
        at once; `.result()` waits only for the submit that holds the copy. A training loop
        reads step k's loss after recording step k+1, so the GPU never idles on the host."""
        if self._lazy:
            self.realize_lazy()
        if self._recording is not None:
            self._recording.reads += 1
        nbytes = -(-max(buf.nbytes, 4) // 4) * 4
        bucket = self._staging.setdefault(_size_class(nbytes), [])
        staging = bucket.pop() if bucket else self._device.create_buffer(
            size=_size_class(nbytes), usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        if buf.len:
            self._pending.append(("copy", buf._gpu, 0, staging, 0, nbytes))
            self._maybe_flush()
        return PendingRead(self, staging, bucket, buf.dtype, buf.len, nbytes, self.stats["submits"])

    # ------------------------------------------------------------------ kernels

    def _layout(self, n_in: int, n_out: int):
        key = (n_in, n_out)
        if key not in self._layouts:
            entries = [{"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True,
                                   "min_binding_size": PARAM_SLOT_BYTES}}]
            for i in range(n_in + n_out):
                kind = (wgpu.BufferBindingType.read_only_storage if i < n_in
                        else wgpu.BufferBindingType.storage)
                entries.append({"binding": i + 1, "visibility": wgpu.ShaderStage.COMPUTE,
                                "buffer": {"type": kind}})
            bgl = self._device.create_bind_group_layout(entries=entries)
            pipeline_layout = self._device.create_pipeline_layout(bind_group_layouts=[bgl])
            self._layouts[key] = (bgl, pipeline_layout)
        return self._layouts[key]

    def kernel(self, name: str, source: str, n_in: int, n_out: int, param_format: str,
               entry_point: str = "main") -> Kernel:
        """Compile (once; cached by source) a WGSL compute kernel.

        param_format is a `struct` format of 4-byte fields ('I' u32, 'i' i32, 'f' f32)
        matching the kernel's uniform `Params` struct field by field.
        """
        key = (source, entry_point, n_in, n_out, param_format)
        kernel = self._kernels.get(key)
        if kernel is not None:
            return kernel
        bgl, pipeline_layout = self._layout(n_in, n_out)
        try:
            module = shaders.create_module(self._device, name, source)  # trusted modules: shaders.py
            pipeline = self._device.create_compute_pipeline(
                label=name, layout=pipeline_layout,
                compute={"module": module, "entry_point": entry_point})
        except wgpu.GPUError as exc:
            raise GpuError(f"kernel {name!r} failed to compile on {self.adapter_name}: {exc}") from exc
        param_struct = struct.Struct("<" + param_format)
        if param_struct.size > PARAM_SLOT_BYTES:
            raise ValueError(f"kernel {name}: {param_struct.size} bytes of parameters, at most {PARAM_SLOT_BYTES}")
        kernel = Kernel(name, pipeline, bgl, n_in, n_out, param_struct)
        self._kernels[key] = kernel
        self.stats["pipelines"] += 1
        return kernel

    def _new_bind_group(self, kernel: Kernel, key: tuple, inputs, outputs):
        """Create and cache the bind group of `kernel` over these Buffers (`key` names them)."""
        raw = self._raw_groups
        group = raw.create(kernel.layout, key, inputs, outputs) if raw is not None else None
        if group is None:
            entries = [{"binding": 0, "resource": {"buffer": self._param_ring, "offset": 0,
                                                   "size": PARAM_SLOT_BYTES}}]
            for i, b in enumerate((*inputs, *outputs)):
                entries.append({"binding": i + 1, "resource": {"buffer": b._mem, "offset": 0, "size": b._size}})
            group = self._device.create_bind_group(layout=kernel.layout, entries=entries)
        # The key holds the wgpu buffers, so none is destroyed or reused while its group is cached.
        self._bind_groups[key] = group
        if len(self._bind_groups) > MAX_BIND_GROUPS:
            del self._bind_groups[next(iter(self._bind_groups))]  # the oldest
        return group

    def _forget_bind_groups(self, gpu_buffer) -> None:
        gone = [k for k in self._bind_groups if any(b is gpu_buffer for b in k[1:])]
        for k in gone:
            del self._bind_groups[k]

    def grid(self, n_workgroups: int) -> tuple[int, int, int]:
        """Fold a 1-D workgroup count into (x, y, 1) with x <= 65535. Kernels recover
        the linear index as wid.x + wid.y * num_workgroups.x and bounds-check it."""
        n = max(int(n_workgroups), 1)
        if n <= WORKGROUPS_PER_DIM:
            return (n, 1, 1)
        y = -(-n // WORKGROUPS_PER_DIM)
        x = -(-n // y)
        if y > WORKGROUPS_PER_DIM:
            raise LimitError(f"dispatch of {n} workgroups is over the adapter's "
                             f"max-compute-workgroups-per-dimension squared ({WORKGROUPS_PER_DIM}^2)")
        return (x, y, 1)

    def launch(self, kernel: Kernel, inputs, outputs, params=(), grid=(1, 1, 1)) -> None:
        """Record one dispatch of `kernel` over `grid` workgroups (x, y, z)."""
        # The hot path of every op: kept to plain local operations (see tests/bench for the cost).
        if self._lazy:  # deferred elementwise work goes first: this kernel may read or overwrite its inputs
            self.realize_lazy()
        if len(inputs) != kernel.n_in or len(outputs) != kernel.n_out:
            raise ValueError(f"{kernel.name}: expected {kernel.n_in} inputs and {kernel.n_out} outputs, "
                             f"got {len(inputs)} and {len(outputs)}")
        gx, gy, gz = grid
        if not (0 < gx <= WORKGROUPS_PER_DIM and 0 < gy <= WORKGROUPS_PER_DIM and 0 < gz <= WORKGROUPS_PER_DIM):
            if gx == 0 or gy == 0 or gz == 0:
                return
            raise LimitError(f"{kernel.name}: grid {grid} is over the adapter's "
                             f"max-compute-workgroups-per-dimension ({WORKGROUPS_PER_DIM})")
        gpu_buffers = [b._mem for b in inputs]  # all realized (above)
        gpu_buffers += [b._mem for b in outputs]
        key = (kernel.layout, *gpu_buffers)
        group = self._bind_groups.get(key)
        if group is None:
            if None in gpu_buffers:  # wgpu would abort the process on it
                raise ValueError(f"{kernel.name}: a Buffer passed to launch was already freed")
            outs = gpu_buffers[kernel.n_in:]
            if any(any(o is b for b in gpu_buffers[:kernel.n_in + i]) for i, o in enumerate(outs)):
                # One buffer bound read-only and read-write (or written twice) in a dispatch is a
                # usage conflict that WebGPU only reports at submit; refuse it here instead.
                raise ValueError(f"{kernel.name}: an output buffer is also passed as another argument; "
                                 f"in-place kernels must take it once, as an output")
            group = self._new_bind_group(kernel, key, inputs, outputs)
        slot = self._n_params
        offset = slot * self._slot
        pack_params(kernel.param_struct, self._params, offset, params)
        self._n_params = slot + 1
        # Pending commands hold wgpu buffers (through the bind group), not Buffers: a
        # Buffer freed now may be reused by later work of this batch (stream order).
        pending = self._pending
        pending.append(("dispatch", kernel.pipeline, group, slot, (int(gx), int(gy), int(gz)), kernel, key))
        self.stats["dispatches"] += 1
        if len(pending) >= MAX_PENDING or slot + 1 >= MAX_PENDING:
            self._maybe_flush()

    def dynamic(self, fn):
        """Run fn() now and return its result. While a step is being captured
        (runtime/capture.py), the kernels fn launches are the step's dynamic part: a replay
        calls fn again with launches diverted to refresh only their parameters, so host
        values fn computes (a step count, a scheduled learning rate) stay live. fn must
        launch the same kernels on the same buffers each time and allocate nothing."""
        recording = self._recording
        if recording is None:
            return fn()
        self.realize_lazy()  # earlier deferred work is not part of fn's dispatches
        fuse, self.fuse = self.fuse, False  # a replay patches fn's launches one for one
        try:
            first = self.stats["dispatches"]
            result = fn()
        finally:
            self.fuse = fuse
        recording.dynamic(fn, first, self.stats["dispatches"])
        return result

    def time_gpu(self, record) -> float | None:
        """GPU seconds taken by the dispatches that `record()` launches.

        Timestamp queries are written at the start and end of the one compute pass
        that holds those dispatches. Returns None when the adapter lacks
        'timestamp-query', or when `record` did something that splits the pass (a
        copy, clear, read or submit): time such work with `synchronize` and a clock.
        Waits for the GPU before and after."""
        if "timestamp-query" not in self.features:
            return None
        self.synchronize()  # an idle queue: the pass's first timestamp marks its own start
        if self._timestamps is None:
            query_set = self._device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            resolved = self._device.create_buffer(
                size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
            readable = self._device.create_buffer(
                size=16, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            self._timestamps = (query_set, resolved, readable)
        query_set, resolved, readable = self._timestamps
        pending = self._pending
        pending.append(("timestamps", query_set))
        start = len(pending)
        record()
        self.realize_lazy()
        if (self._pending is not pending or len(pending) == start
                or any(cmd[0] != "dispatch" for cmd in pending[start:])):
            self.flush()
            return None
        pending.append(("resolve", query_set, resolved, readable))
        self.flush()
        try:
            readable.map_sync(wgpu.MapMode.READ, 0, 16)
            begin, end = np.frombuffer(readable.read_mapped(0, 16, copy=True), dtype=np.uint64)
            readable.unmap()
        except wgpu.GPUError as exc:
            raise GpuError(f"reading timestamps failed on {self.adapter_name}: {exc}") from exc
        return max(int(end) - int(begin), 0) * 1e-9  # wgpu reports timestamps in nanoseconds

    # ------------------------------------------------------------------ submission

    def _maybe_flush(self) -> None:
        pending = len(self._pending)
        if pending >= MAX_PENDING or self._n_params >= MAX_PENDING:
            if (self._gates and pending < HELD_MAX - 1 and self._n_params < HELD_MAX - 1
                    and not all(ready() for ready in self._gates)):
                return  # held behind a gate: keep recording (see the module doc)
            self.flush()

    def gate(self, ready: Callable[[], bool], wait: Callable[[], None],
             notify: Callable[[Callable[[], None]], None] | None = None) -> None:
        """Hold back the work recorded after this call until `wait()` has returned.

        ready(): whether wait() would return at once. wait() runs on this thread inside a
        flush, after the commands recorded before the gate were submitted; what it raises
        comes out of that flush (the held commands are then dropped). While a step is being
        captured there is no holding back: the gate waits now.

        notify (optional): notify(callback) has callback() called, on any thread, once the
        gate may open without error (once, right away if it already may). A replay uses it
        to submit what its deferred gates hold from that thread (runtime/capture.py `_Chain`)."""
        if self._lazy:
            self.realize_lazy()
        if self._recording is not None:  # captured: a replay waits at this point (runtime/capture.py)
            self.flush()
            self._recording.host("gate", ready, wait, notify)
            wait()
            return
        self._pending.append(("gate", ready, wait))
        self._gates.append(ready)

    def host_call(self, fn: Callable[[], None]) -> None:
        """Submit everything recorded so far, then call fn() (e.g. start a host-side exchange
        that waits for that submission). A step being captured records the call: each
        replay calls fn at the same point, after submitting the commands before it."""
        self.flush()
        if self._recording is not None:
            self._recording.host("call", fn)
        fn()

    def defer(self, tail: Callable[[], None]) -> None:
        """Hand the device work to submit before anything else: the next flush (every read,
        host write, synchronize, replay or full batch flushes) calls tail() first. A captured
        step's replay leaves the gates that end it and what they hold here (runtime/capture.py),
        so the caller goes on while the exchanges run. What tail() raises comes out of
        that flush. Host uploads need not wait for it: the buffers a replay reads are pinned
        (never handed out again while it lives), a Buffer freed while a tail is deferred (a
        replay's output the caller dropped, which the tail still writes) is retired until
        the tail is submitted, and writes into a live Buffer (`write`) flush first."""
        if self._deferred is not None:
            self.flush()
        self._deferred = tail

    def flush(self) -> None:
        """Encode and submit everything recorded so far (does not wait)."""
        if self._lazy:
            self.realize_lazy()
        self._submitting = True  # a Buffer freed from here on may be in the batch being encoded
        try:
            self._submit_pending()
        finally:
            self._submitting = False

    def _submit_pending(self) -> None:
        if self._deferred is not None:
            tail, self._deferred = self._deferred, None
            touched = getattr(tail, "touched", None)
            if touched is not None:
                try:
                    self._submit_ahead(touched)
                except BaseException:
                    self._deferred = tail  # still to be submitted (its own errors come from it)
                    raise
            tail()
        pending, self._pending = self._pending, []
        n_params, self._n_params = self._n_params, 0
        retired, self._retired = self._retired, {}
        self._retired_count = 0
        gated, self._gates = bool(self._gates), []
        if not pending:
            self._recycle(retired)
            return
        if self._recording is not None:
            self._recording.add_batch(pending, self._params, self._slot)
        try:
            if n_params:  # one ring write for all of the batch's parts (queue order keeps it first)
                self._queue.write_buffer(self._param_ring, 0, self._params, 0, n_params * self._slot)
            if not gated:
                self._submit_commands(pending)
            else:
                start = 0
                for index, cmd in enumerate(pending):
                    if cmd[0] == "gate":
                        if index > start:
                            self._submit_commands(pending[start:index])
                        cmd[2]()
                        start = index + 1
                # What was held back (up to HELD_MAX commands) goes out in submits of MAX_PENDING,
                # so the GPU starts on the first while the rest is still being encoded.
                for begin in range(start, len(pending), MAX_PENDING):
                    self._submit_commands(pending[begin:begin + MAX_PENDING])
        except wgpu.GPUError as exc:
            raise GpuError(f"GPU error on {self.adapter_name}: {exc}") from exc
        finally:
            self.stats["submits"] += 1
            self._recycle(retired)

    def _submit_ahead(self, touched: set) -> bool:
        """Submit now, ahead of a deferred tail, the recorded commands that touch none of the
        buffers the tail uses (`touched`: ids of wgpu buffers) nor any buffer a command held
        back touches; keep the rest pending, in order. True when nothing is left pending.

        The tail of a data-parallel replay waits for the last bucket's exchange; the next
        step's input preparation (recorded meanwhile on fresh buffers) need not wait with it,
        so the GPU has it done before the next forward instead of the host encoding it after
        the wait, on the GPU's critical path. Buffers freed while the tail is deferred are not
        handed out again until it is submitted (`_take`), so fresh work meets none of its."""
        pending = self._pending
        if not pending:
            return True
        if self._recording is not None or any(cmd[0] not in ("dispatch", "copy", "clear") for cmd in pending):
            return False
        held_ids = set(touched)
        ahead, behind = [], []
        for cmd in pending:
            kind = cmd[0]
            buffers = cmd[6][1:] if kind == "dispatch" else (cmd[1], cmd[3]) if kind == "copy" else (cmd[1],)
            ids = {id(b) for b in buffers}
            if ids & held_ids:
                behind.append(cmd)
                held_ids |= ids
            else:
                ahead.append(cmd)
        if not ahead:
            return False
        try:
            if self._n_params:  # the ring holds every pending dispatch's parameters, held-back ones too
                self._queue.write_buffer(self._param_ring, 0, self._params, 0, self._n_params * self._slot)
            self._submit_commands(ahead)
        except wgpu.GPUError as exc:
            raise GpuError(f"GPU error on {self.adapter_name}: {exc}") from exc
        finally:
            self.stats["submits"] += 1
        self._pending = behind
        return not behind

    def submit_ahead(self, touched: set) -> bool:
        """`_submit_ahead` (deferred elementwise work realized first) for a deferred tail that
        uses the buffers `touched`: True when nothing recorded is left pending, so what comes
        next may follow the tail directly."""
        if self._lazy:
            self.realize_lazy()
        return self._submit_ahead(touched)

    def _submit_commands(self, commands) -> None:
        encoder = self._device.create_command_encoder()
        if self._raw_calls:
            with native.Captured(self.adapter_name):
                self._encode(encoder, commands, self._offset_ptrs)
        else:
            self._encode(encoder, commands, None)
        self._queue.submit([encoder.finish()])
        self._staged_writes[0] = self._staged_writes[1] = 0

    def _encode(self, encoder, commands, offset_ptrs) -> None:
        """Record `commands` (the pending list's tuples) into `encoder`; consecutive
        dispatches share one compute pass. With `offset_ptrs` (C pointers to each slot's
        dynamic offset, see native.offset_table) dispatches go through direct C calls."""
        compute_pass = pipeline = timestamp_writes = None
        raw = offset_ptrs is not None
        if raw:
            set_pipeline, set_bind_group, dispatch = native.set_pipeline, native.set_bind_group, native.dispatch
        for cmd in commands:
            kind = cmd[0]
            if kind == "dispatch":
                if compute_pass is None:
                    if timestamp_writes is None:
                        compute_pass = encoder.begin_compute_pass()
                    else:
                        compute_pass = encoder.begin_compute_pass(timestamp_writes=timestamp_writes)
                        timestamp_writes = None
                    pass_handle = compute_pass._internal
                    pipeline = None
                if raw:
                    if cmd[1] is not pipeline:  # chains of one op set their pipeline once
                        pipeline = cmd[1]
                        set_pipeline(pass_handle, pipeline._internal)
                    set_bind_group(pass_handle, 0, cmd[2]._internal, 1, offset_ptrs[cmd[3]])
                    gx, gy, gz = cmd[4]
                    dispatch(pass_handle, gx, gy, gz)
                else:
                    if cmd[1] is not pipeline:
                        pipeline = cmd[1]
                        compute_pass.set_pipeline(pipeline)
                    compute_pass.set_bind_group(0, cmd[2], (cmd[3] * self._slot,))
                    compute_pass.dispatch_workgroups(*cmd[4])
                continue
            if compute_pass is not None:
                compute_pass.end()
                compute_pass = None
            if kind == "copy":
                encoder.copy_buffer_to_buffer(cmd[1], cmd[2], cmd[3], cmd[4], cmd[5])
            elif kind == "clear":
                encoder.clear_buffer(cmd[1], 0, -(-cmd[2] // 4) * 4)
            elif kind == "timestamps":  # the next compute pass is timed (see time_gpu)
                timestamp_writes = {"query_set": cmd[1], "beginning_of_pass_write_index": 0,
                                    "end_of_pass_write_index": 1}
            elif kind == "resolve":
                encoder.resolve_query_set(cmd[1], 0, 2, cmd[2], 0)
                encoder.copy_buffer_to_buffer(cmd[2], 0, cmd[3], 0, 16)
        if compute_pass is not None:
            compute_pass.end()

    def _recycle(self, retired: dict) -> None:
        submits = self.stats["submits"]
        for size, gpu_buffers in retired.items():
            bucket = self._free.setdefault(size, [])
            bucket.extend(gpu_buffers)
            bucket.sort(key=_buffer_order)
            for gpu_buffer in gpu_buffers:
                self._idle_since[gpu_buffer] = submits
        if submits - self._last_trim >= POOL_TRIM_EVERY:
            self._last_trim = submits
            self._release_idle()

    def _release_idle(self) -> None:
        """Destroy free buffers idle for POOL_IDLE_SUBMITS submits, then the longest idle
        while the pool holds over max_idle_bytes. Runs after a submit: no recorded command
        uses a free buffer, and wgpu defers the release past submitted work that does."""
        now = self.stats["submits"]
        idle = []  # (idle since, size, wgpu buffer) of every free buffer
        for size, bucket in self._free.items():
            idle.extend((self._idle_since.get(b, now), size, b) for b in bucket)
        idle.sort(key=lambda entry: entry[0])
        held = sum(size for _, size, _ in idle)
        doomed = []
        for since, size, gpu_buffer in idle:
            if now - since < POOL_IDLE_SUBMITS and held <= self.max_idle_bytes:
                break
            doomed.append(gpu_buffer)
            held -= size
        if not doomed:
            return
        gone = {id(b) for b in doomed}
        for size, bucket in self._free.items():
            bucket[:] = [b for b in bucket if id(b) not in gone]
        self._idle_since = {b: since for since, _, b in idle if id(b) not in gone}
        stale = [k for k in self._bind_groups if any(id(b) in gone for b in k[1:])]
        for key in stale:
            del self._bind_groups[key]
        for gpu_buffer in doomed:
            self._owned.discard(gpu_buffer)
            gpu_buffer.destroy()

    def synchronize(self) -> None:
        """Submit pending work and wait until the GPU has finished it."""
        self.flush()
        # Mapping a buffer written by the last submit waits for every earlier submit (queue order).
        if not hasattr(self, "_sync_src"):
            self._sync_src = self.alloc(1)
            self._sync_dst = self._device.create_buffer(
                size=4, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        self._pending.append(("copy", self._sync_src._gpu, 0, self._sync_dst, 0, 4))
        self.flush()
        try:
            self._sync_dst.map_sync(wgpu.MapMode.READ, 0, 4)
            self._sync_dst.unmap()
        except wgpu.GPUError as exc:
            raise GpuError(f"GPU error on {self.adapter_name}: {exc}") from exc

    @property
    def pool_bytes(self) -> int:
        """Bytes held idle in the pool (free list)."""
        return sum(size * len(b) for size, b in self._free.items())


class PendingRead:
    """A read-back recorded by `Device.read_later`; `result()` gives the 1-D numpy array."""

    __slots__ = ("_dev", "_staging", "_bucket", "_dtype", "_len", "_nbytes", "_submits", "_value")

    def __init__(self, dev, staging, bucket, dtype, length, nbytes, submits):
        self._dev, self._staging, self._bucket = dev, staging, bucket
        self._dtype, self._len, self._nbytes, self._submits = dtype, length, nbytes, submits
        self._value = None

    def result(self) -> np.ndarray:
        if self._value is None:
            dtype = DTYPES[self._dtype]
            if self._dev.stats["submits"] == self._submits:  # the copy is still in the pending batch
                self._dev.flush()
            try:
                if host_staging.AVAILABLE and self._dev.adapter_type != "CPU":
                    data = host_staging.read_when_done(self._dev, self._staging, self._nbytes)  # this copy only
                else:  # a software adapter: polling would take cycles from the cores doing its GPU work
                    self._staging.map_sync(wgpu.MapMode.READ, 0, self._nbytes)
                    data = self._staging.read_mapped(0, self._nbytes, copy=True)
                    self._staging.unmap()
            except wgpu.GPUError as exc:
                raise GpuError(f"read failed on {self._dev.adapter_name}: {exc}") from exc
            self._bucket.append(self._staging)
            self._value = to_host(np.frombuffer(data, dtype=storage_numpy(dtype))[:self._len].copy(), dtype)
        return self._value


def list_adapters():
    """Every adapter wgpu can see, as wgpu adapter objects."""
    webgpu.current()  # a bad ANYGPU_RUNTIME, or Dawn asked for and missing, says so itself
    try:
        return list(webgpu.quiet_stderr(wgpu.gpu.enumerate_adapters_sync))
    except Exception as exc:  # no loader, broken ICD
        raise GpuError(f"wgpu could not enumerate adapters: {exc}") from exc


# ANYGPU_BACKEND takes SPEC's short names; wgpu reports e.g. "OpenGL", "D3D12".
_BACKEND_ALIASES = {"gl": "opengl", "dx12": "d3d12", "vk": "vulkan"}

NO_ADAPTER_HELP = ("no GPU adapter found. Install a Vulkan driver; on Debian/Ubuntu the software "
                   "one is: apt-get install -y mesa-vulkan-drivers")


@dataclass(frozen=True)
class AdapterInfo:
    """One adapter as `anygpu.devices()` lists it. `index` is its place in wgpu's enumeration
    (stable on one machine), which tells apart cards of the same name: ANYGPU_ADAPTER=<index>."""

    index: int
    name: str
    backend: str
    type: str
    driver: str
    vendor_id: int = 0
    device_id: int = 0


def adapter_infos() -> list[AdapterInfo]:
    """Every adapter wgpu sees, with its index (see AdapterInfo)."""
    return [AdapterInfo(i, a.info.get("device") or a.info.get("description") or "unknown",
                        a.info.get("backend_type", "unknown"), a.info.get("adapter_type", "unknown"),
                        a.info.get("description", ""), int(a.info.get("vendor_id") or 0),
                        int(a.info.get("device_id") or 0))
            for i, a in enumerate(list_adapters())]


def choose_adapter(name: str | None, backend: str | None, power_preference: str):
    """Pick an adapter: by index (a whole number, as `anygpu info` numbers them), by name
    substring and/or backend when asked, otherwise the one wgpu prefers for `power_preference`.
    "fastest": the adapter (of `backend`, if given) with the best cached measurement (measure.py)."""
    if name and name.strip().lower() == "fastest":
        from .measure import fastest  # measures, once per adapter and driver, those not in the cache

        name, backend = str(fastest(backend)[0].index), None
    if name and name.strip().isdigit():
        adapters = list_adapters()
        index = int(name)
        if index >= len(adapters):
            raise GpuError(f"ANYGPU_ADAPTER={name}: expected an adapter index in [0, {len(adapters)}), "
                           f"wgpu sees {len(adapters)} adapters (see 'anygpu info')")
        return adapters[index]
    if name or backend:
        found = []
        for a in list_adapters():
            info = a.info
            if name and name.lower() not in (info.get("device", "") + " " + info.get("description", "")).lower():
                continue
            if backend and _BACKEND_ALIASES.get(backend.lower(), backend.lower()) != info.get("backend_type", "").lower():
                continue
            found.append(a)
        if not found:
            seen = ", ".join(f"{a.info.get('device')} ({a.info.get('backend_type')})" for a in list_adapters())
            raise GpuError(f"no adapter matches adapter={name!r} backend={backend!r}; "
                           f"adapters seen: {seen or 'none'}")
        # Prefer discrete, then integrated, then anything (CPU adapters last).
        rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
        found.sort(key=lambda a: rank.get(a.info.get("adapter_type"), 4))
        return found[0]
    adapter = webgpu.quiet_stderr(lambda: wgpu.gpu.request_adapter_sync(power_preference=power_preference))
    if adapter is None:
        raise GpuError(NO_ADAPTER_HELP)
    return adapter

