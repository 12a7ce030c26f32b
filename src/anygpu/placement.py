"""torch.device for anygpu: which WebGPU adapter a tensor lives on.

anygpu computes on WebGPU adapters, one adapter per process (several GPUs: one process
each, see `anygpu.distributed`). A `device` names an adapter by its index in the list
wgpu enumerates (`anygpu info` prints it):

- ``"cuda"``, ``"mps"``, ``"gpu"``, ``"xpu"`` without an index: the process's adapter;
  ``"cuda:N"`` (or ``mps:N``, ``gpu:N``): adapter N, which must be the process's adapter
  (choose it before the first tensor with `anygpu.cuda.set_device(N)` or ANYGPU_ADAPTER).
  Under `anygpu.distributed`, ``cuda:<local rank>`` names the rank's own adapter, as DDP
  scripts write it.
- ``"cpu"``: anygpu keeps no tensors in host memory; ``"cpu"`` tensors live on the
  process's adapter too, and `.numpy()`, `.tolist()`, `.item()` read them back. So
  ``.cpu()`` and ``.to("cpu")`` return the tensor itself, as torch does for a tensor that
  is already there.

`Tensor.device` reports ``device(type='cuda', index=N)`` for the adapter holding the data.
"""

from __future__ import annotations

import os
import sys
import threading

from . import ops
from .runtime import list_adapters

__all__ = ["device", "device_of", "check_device", "adapter_count", "adapter_infos", "current_index",
           "select_adapter"]

# Types that name a WebGPU adapter; "cpu" is accepted and means the same adapter (see above).
ADAPTER_TYPES = ("cuda", "mps", "gpu", "xpu")
DEVICE_TYPES = ("cpu",) + ADAPTER_TYPES


class device:
    """torch.device: ``device("cuda:1")``, ``device("cuda", 1)``, ``device(1)``, ``device("cpu")``.

    Holds a type and an optional index; compares equal to another device with the same
    type and index (``device("cuda") != device("cuda:0")``, as in torch). As a context
    manager it only checks that the device can be used (every factory already allocates on
    the process's adapter)."""

    __slots__ = ("_type", "_index")

    def __init__(self, type, index=None):  # noqa: A002 — torch's parameter name
        if isinstance(type, device):
            if index is not None:
                raise ValueError(f"device: an index ({index!r}) cannot be given with a device object {type}")
            self._type, self._index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        if not isinstance(type, str):
            raise ValueError(f"device: expected a string such as 'cuda:0' or 'cpu', an int or a device, "
                             f"got {type!r}")
        text = type.strip()
        name, colon, number = text.partition(":")
        if colon:
            if index is not None:
                raise ValueError(f"device: {text!r} already has an index; got index={index!r} as well")
            if not number.isdigit():
                raise ValueError(f"device: invalid device string {text!r}; expected e.g. 'cuda:0'")
            index = int(number)
        if name not in DEVICE_TYPES:
            raise ValueError(f"device: unknown device type {name!r} in {text!r}; expected one of "
                             f"{', '.join(DEVICE_TYPES)} (anygpu runs them all on WebGPU adapters)")
        if index is not None:
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ValueError(f"device: index must be a non-negative int, got {index!r}")
            if name == "cpu" and index != 0:
                raise ValueError(f"device: 'cpu' takes index 0 or none, got {index}")
        self._type, self._index = name, index

    @property
    def type(self) -> str:
        return self._type

    @property
    def index(self) -> int | None:
        return self._index

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        if self._index is None:
            return f"device(type={self._type!r})"
        return f"device(type={self._type!r}, index={self._index})"

    def __eq__(self, other):
        if not isinstance(other, device):
            return NotImplemented
        return (self._type, self._index) == (other._type, other._index)

    def __hash__(self) -> int:
        return hash((self._type, self._index))

    def __enter__(self):
        check_device("device", self)
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------- adapters by index

_lock = threading.Lock()
_adapters: list | None = None  # wgpu's adapter infos, enumerated once (about 1 s on lavapipe)
_device_objects: dict[int, device] = {}  # id(runtime Device) -> its torch-style device


def adapter_infos() -> list[dict]:
    """The info dict of every adapter wgpu enumerates, in index order (cached)."""
    global _adapters
    with _lock:
        if _adapters is None:
            _adapters = [dict(adapter.info) for adapter in list_adapters()]
        return _adapters


def adapter_count() -> int:
    return len(adapter_infos())


def _index_of(dev) -> int:
    """The index of the runtime Device's adapter in `adapter_infos()`."""
    known = getattr(dev, "adapter_index", None)
    if isinstance(known, int):
        return known
    for index, info in enumerate(adapter_infos()):
        name = info.get("device") or info.get("description") or "unknown"
        if (name == dev.adapter_name and info.get("backend_type", "unknown") == dev.backend
                and info.get("description", "") == dev.driver):
            return index
    return 0  # an adapter that enumeration does not list (should not happen): call it the first


def device_of(dev) -> device:
    """The torch-style device for a runtime Device (what `Tensor.device` returns)."""
    found = _device_objects.get(id(dev))
    if found is None:
        found = _device_objects[id(dev)] = device("cuda", _index_of(dev))
    return found


def current_index() -> int:
    """The index of the process's adapter (opens it if no tensor exists yet)."""
    return device_of(ops.gpu()).index


def _is_local_rank(index: int) -> bool:
    """Under anygpu.distributed, `cuda:<local rank>` (how DDP scripts name their GPU, e.g.
    `torch.cuda.set_device(local_rank)`) means the rank's own adapter, the one
    init_process_group dealt to it, whatever its place in wgpu's list."""
    dist = sys.modules.get("anygpu.distributed")
    try:
        if dist is None:
            return False
        if dist.is_initialized():
            return index == dist.get_local_rank()
        # Launched by MPI, before init_process_group (a torchrun-style script calls
        # set_device(LOCAL_RANK) first): init_process_group will deal this rank its adapter.
        local = os.environ.get("LOCAL_RANK", "").strip()
        return dist.launched_by_mpi() > 1 and local.isdigit() and index == int(local)
    except (AttributeError, RuntimeError, ValueError):
        return False


def select_adapter(index: int, op: str = "set_device") -> None:
    """Make adapter `index` the process's adapter. Allowed before the first tensor exists
    (the adapter is then opened); afterwards only the adapter in use may be named."""
    if _is_local_rank(index):
        return
    count = adapter_count()
    if not 0 <= index < count:
        names = ", ".join(f"[{i}] {info.get('device') or info.get('description')} ({info.get('backend_type')})"
                          for i, info in enumerate(adapter_infos()))
        raise ValueError(f"{op}: adapter index {index} does not exist; wgpu sees {count} adapter(s): {names}")
    with ops._lock:
        opened = ops._default
        if opened is None:
            ops._default = ops.Device(adapter=str(index))
            return
    in_use = device_of(opened).index
    if index != in_use:
        raise ValueError(
            f"{op}: adapter {index} was asked for, but this process computes on adapter {in_use} "
            f"({opened.adapter_name}); anygpu uses one adapter per process. Pick it before the first "
            f"tensor (anygpu.cuda.set_device({index}) or ANYGPU_ADAPTER={index}), or run one process "
            "per adapter (anygpu.distributed)")


def check_device(op: str, dev) -> None:
    """Check a `device=` argument (str, int, device or None) before any GPU work.

    None, "cpu" and adapter types without an index mean the process's adapter; an index
    must name it (or, before the first tensor, selects it)."""
    if dev is None:
        return
    parsed = dev if isinstance(dev, device) else device(dev)
    if parsed.type == "cpu" or parsed.index is None:
        return
    opened = ops._default
    if opened is not None and device_of(opened).index == parsed.index:
        return
    select_adapter(parsed.index, op)
