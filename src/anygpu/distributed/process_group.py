"""The process group: MPI's world through mpi4py, collectives on Tensors and host arrays.

There is one process group per process (torch's default group); ``group=`` arguments are
accepted for torch compatibility and must be None. Collectives are blocking MPI
calls made on one worker thread and waited for with a deadline (see ``_Worker``), so a dead
or hung peer becomes a ``DistributedError`` instead of a hang.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
import threading
import time
import warnings
import queue
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DistributedError", "ReduceOp", "abort", "all_gather", "all_gather_numbers", "all_gather_strings",
    "all_reduce", "all_reduce_array", "barrier", "broadcast", "destroy_process_group", "get_local_rank",
    "get_local_world_size", "get_rank", "get_world_size", "init_process_group", "is_available", "is_initialized",
    "launched_by_mpi", "reduce_scatter", "reduce", "gather", "scatter", "get_backend", "is_mpi_available",
    "is_nccl_available", "is_gloo_available", "is_torchelastic_launched", "export_launcher_env",
    "get_default_backend_for_device", "ProcessGroup", "group", "GroupMember",
]

INSTALL_HINT = ("anygpu.distributed needs mpi4py and an MPI library: pip install 'anygpu[dist]' "
                "(mpi4py and the mpich wheel, which also provides mpiexec)")
DEFAULT_TIMEOUT = 300.0  # seconds a collective may wait for the other ranks
# The interpreter's thread switch interval (2e-5 s = 20 us) while a process group with a worker thread is
# up (ANYGPU_DIST_SWITCH_INTERVAL, seconds; Python's default is 0.005). The worker needs the
# GIL back after every C call of an exchange (the map callback, each copy, each MPI call);
# while the main thread records kernels it holds the GIL and gives it up only every switch
# interval, so at 5 ms an exchange of a few milliseconds took tens (measured on 2 x H200).
SWITCH_INTERVAL = 2e-5
_STRING_BYTES = 256  # all_gather_strings: longest string, in UTF-8 bytes


class DistributedError(RuntimeError):
    """A collective could not complete: a peer died, hung or left, or MPI failed."""


class ReduceOp:
    """The reductions of ``all_reduce`` / ``reduce_scatter`` (torch.distributed.ReduceOp's names)."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MAX = "max"
    MIN = "min"


_OPS = (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT, ReduceOp.MAX, ReduceOp.MIN)


@dataclass
class _Group:
    mpi: object  # the mpi4py.MPI module
    comm: object
    rank: int
    size: int
    local_rank: int
    local_size: int
    timeout: float
    executor: "_Worker | None" = None
    node: object = None  # communicator of this host's ranks (MPI shared memory works within it)
    windows: dict | None = None  # capacity in bytes -> _SharedSlots (allreduce_mapped)
    switch_interval: float | None = None  # the interpreter's, before init_process_group lowered it
    copiers: "ThreadPoolExecutor | None" = None  # _SharedSlots' helper threads (copy_threads > 1)
    copy_threads: int = 1


_group: _Group | None = None
_exit_hook = False  # _settle_at_exit is registered
# ANYGPU_DIST_TRACE=1: (seconds, thread name, event) of the exchanges, for benchmarks/distributed.py
TRACE: list | None = [] if os.environ.get("ANYGPU_DIST_TRACE") else None


def trace(event: str) -> None:
    if TRACE is not None:
        TRACE.append((time.perf_counter(), threading.current_thread().name, event))


# --------------------------------------------------------------------------- set-up


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    except RuntimeError as exc:  # mpi4py present, but no MPI library to load
        raise ImportError(f"{INSTALL_HINT}; mpi4py could not load MPI: {exc}") from exc
    return MPI


def is_available() -> bool:
    """Whether mpi4py and an MPI library can be imported (does not initialize MPI)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def launched_by_mpi(environ=None) -> int:
    """The world size an MPI launcher announced in the environment (mpiexec of MPICH or
    Open MPI, Intel MPI, MVAPICH, Slurm's srun with PMI), or 0 when not launched by one."""
    environ = os.environ if environ is None else environ
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE"):
        value = str(environ.get(name, "")).strip()
        if value.isdigit():
            return int(value)
    return 0


# Where MPI launchers put (rank, world size, local rank, local world size); first found wins.
_LAUNCHER_ENV = (
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),  # MPICH's hydra (the mpich wheel)
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),
    ("PMIX_RANK", "PMIX_SIZE", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),  # srun --mpi=pmix
)


def export_launcher_env(environ=None) -> dict:
    """Under an MPI launcher, set torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
    LOCAL_WORLD_SIZE) from the launcher's where they are not set yet, so a script written for
    `torchrun` (``int(os.environ["LOCAL_RANK"])`` before init_process_group) runs unchanged
    under ``mpiexec``. Called when anygpu.distributed is imported. Returns what it set."""
    environ = os.environ if environ is None else environ
    if not launched_by_mpi(environ):
        return {}  # not started by an MPI launcher (a batch job's plain process has SLURM_* too)
    for names in _LAUNCHER_ENV:
        values = [environ.get(name, "").strip() for name in names]
        if values[0].isdigit() and values[1].isdigit():
            break
    else:
        return {}
    wanted = dict(zip(("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"), values))
    if not wanted["LOCAL_RANK"].isdigit() or not wanted["LOCAL_WORLD_SIZE"].isdigit():
        del wanted["LOCAL_RANK"], wanted["LOCAL_WORLD_SIZE"]  # unknown here: init_process_group finds them
    set_now = {name: value for name, value in wanted.items() if name not in environ}
    environ.update(set_now)
    return set_now


def _seconds(timeout) -> float:
    if timeout is None:
        text = os.environ.get("ANYGPU_DIST_TIMEOUT", "").strip()
        if not text:
            return DEFAULT_TIMEOUT
        try:
            timeout = float(text)
        except ValueError:
            raise ValueError(f"ANYGPU_DIST_TIMEOUT: expected a number of seconds, got {text!r}") from None
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"init_process_group: timeout must be a positive number of seconds, got {timeout}")
    return timeout


def _known_backend(backend) -> bool:
    if not isinstance(backend, str):
        return False
    parts = [part.split(":")[-1].strip().lower() for part in backend.split(",")]
    return bool(parts) and all(part in ("mpi", "nccl", "gloo") for part in parts)


def init_process_group(backend: str | None = "mpi", init_method: str | None = None, timeout=None,
                       world_size: int = -1, rank: int = -1, **_ignored) -> None:
    """Join the MPI world: one rank per process, as the launcher started them.

    backend: "mpi" (the only transport; None means the same). torch's "nccl", "gloo" and
    "cuda:nccl,cpu:gloo"-style names are accepted and mean the same, so scripts written for
    them run unchanged under ``mpiexec``. world_size / rank, when given, must agree with the
    launcher's. timeout: seconds (or a timedelta) that any
    collective may wait for the other ranks; default ANYGPU_DIST_TIMEOUT or 300.

    Call it before any tensor exists: with several ranks on one host and ANYGPU_ADAPTER
    unset, each rank opens the adapter of its local rank (the best GPUs wgpu lists, in
    index order, dealt round-robin). ANYGPU_ADAPTER may list one adapter per local rank,
    comma-separated ("0,1").
    """
    global _group
    if backend is not None and not _known_backend(backend):
        raise ValueError(f"init_process_group: backend must be 'mpi' (anygpu's transport is MPI; 'nccl' and "
                         f"'gloo' are accepted as the same), got {backend!r}")
    if init_method not in (None, "env://"):
        raise ValueError(f"init_process_group: init_method is set by the MPI launcher; expected None, "
                         f"got {init_method!r}")
    if _group is not None:
        raise RuntimeError("init_process_group: the default process group is already initialized")
    seconds = _seconds(timeout)
    expected = world_size if world_size not in (-1, None) else os.environ.get("WORLD_SIZE", "").strip()
    if not launched_by_mpi() and str(expected).isdigit() and int(expected) > 1:
        raise RuntimeError(
            f"init_process_group: a world of {expected} processes is expected (torchrun, torch.multiprocessing "
            f"or world_size=), but this process was not started by an MPI launcher and anygpu's ranks are MPI "
            f"processes: start the script with `mpiexec -n {expected} python ...` (scripts written for torchrun "
            f"run unchanged there)")
    MPI = _import_mpi()
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    comm = MPI.COMM_WORLD.Dup()  # our own communicator: user MPI traffic cannot mix with ours
    size, my_rank = comm.Get_size(), comm.Get_rank()
    if world_size not in (-1, None) and world_size != size:
        raise ValueError(f"init_process_group: world_size {world_size} differs from the launcher's {size}")
    if rank not in (-1, None) and rank != my_rank:
        raise ValueError(f"init_process_group: rank {rank} differs from the launcher's {my_rank}")
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=my_rank)
    local_rank, local_size = local.Get_rank(), local.Get_size()
    group = _Group(MPI, comm, my_rank, size, local_rank, local_size, seconds, node=local, windows={})
    if MPI.Query_thread() >= MPI.THREAD_SERIALIZED:
        group.executor = _Worker()
        group.copy_threads = _copy_threads(local_size)
        if group.copy_threads > 1 and size > 1:
            group.copiers = ThreadPoolExecutor(group.copy_threads - 1, thread_name_prefix="anygpu-dist-copy")
        if size > 1:
            interval = float(os.environ.get("ANYGPU_DIST_SWITCH_INTERVAL") or SWITCH_INTERVAL)
            if interval > 0:
                group.switch_interval = sys.getswitchinterval()
                sys.setswitchinterval(min(group.switch_interval, interval))
    _group = group
    _choose_local_adapter(local_rank, local_size)
    if size > 1:
        _abort_on_uncaught_exceptions(MPI)
        global _exit_hook
        if not _exit_hook:
            _exit_hook = True
            atexit.register(_settle_at_exit)  # runs before mpi4py finalizes MPI (registered earlier)


def _choose_local_adapter(local_rank: int, local_size: int) -> None:
    from anygpu import ops

    wanted = os.environ.get("ANYGPU_ADAPTER", "").strip()
    if "," in wanted:  # one adapter per local rank
        parts = [part.strip() for part in wanted.split(",") if part.strip()]
        os.environ["ANYGPU_ADAPTER"] = parts[local_rank % len(parts)]
        wanted = os.environ["ANYGPU_ADAPTER"]
    if wanted or local_size == 1:
        return
    if ops._default is not None:  # the device is open already; too late to choose
        warnings.warn(f"init_process_group: rank {local_rank} already opened {ops._default.adapter_name}; "
                      f"call init_process_group before creating tensors so each rank opens its own GPU",
                      stacklevel=3)
        return
    from anygpu.runtime import adapter_infos

    backend = os.environ.get("ANYGPU_BACKEND", "").strip().lower()
    kinds = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    infos = [info for info in adapter_infos()
             if not backend or backend in (info.backend.lower(), {"opengl": "gl", "d3d12": "dx12"}.get(info.backend.lower()))]
    if not infos:
        return  # Device() will report that no adapter matches

    def preference(info):
        return (kinds.get(info.type, 4), info.backend == "OpenGL")

    best = min(preference(info) for info in infos)
    candidates = [info for info in infos if preference(info) == best]
    os.environ["ANYGPU_ADAPTER"] = str(candidates[local_rank % len(candidates)].index)


def _abort_on_uncaught_exceptions(MPI) -> None:
    """An uncaught exception on one rank aborts the job, so the others do not wait forever."""
    previous = sys.excepthook

    def hook(kind, value, traceback):
        group = _group
        if group is not None and group.size > 1:
            # The one line that matters first: the launcher may end this process while the
            # traceback is still being written (other ranks ending, under load).
            sys.stderr.write(f"anygpu.distributed: rank {group.rank} of {group.size} failed: "
                             f"{kind.__name__}: {value}\n")
            sys.stderr.flush()
        previous(kind, value, traceback)
        if group is not None and group.size > 1:
            sys.stderr.write(f"anygpu.distributed: rank {group.rank} of {group.size} failed; aborting the job\n")
            _abort_job(group, 1)

    sys.excepthook = hook


def _need_group(op: str) -> _Group:
    if _group is None:
        raise RuntimeError(f"{op}: the default process group is not initialized; call "
                           f"anygpu.distributed.init_process_group() first")
    return _group


def is_initialized() -> bool:
    return _group is not None


def get_rank(group=None) -> int:
    return _need_group("get_rank").rank


def get_world_size(group=None) -> int:
    return _need_group("get_world_size").size


def get_local_rank() -> int:
    """This rank's index among the ranks of its host (which GPU of the host it opens)."""
    return _need_group("get_local_rank").local_rank


def get_local_world_size() -> int:
    return _need_group("get_local_world_size").local_size


def destroy_process_group(group=None) -> None:
    """Leave the process group (MPI itself is finalized at interpreter exit)."""
    global _group
    group_state, _group = _group, None
    if group_state is None:
        return
    try:
        _settle(group_state, "destroy_process_group")
    finally:
        if group_state.executor is not None:
            group_state.executor.shutdown()
        if group_state.copiers is not None:
            group_state.copiers.shutdown(wait=False)
    if group_state.switch_interval is not None:
        sys.setswitchinterval(group_state.switch_interval)
    try:
        for slots in (group_state.windows or {}).values():
            slots.free()
        if group_state.node is not None:
            group_state.node.Free()
        group_state.comm.Free()
    except Exception:  # MPI already finalized
        pass


def abort(message: str, code: int = 1) -> None:
    """Print `message` on stderr and end every rank of the job (MPI_Abort)."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    group = _group
    if group is not None and group.size > 1:
        _abort_job(group, code)
    sys.stderr.flush()
    raise SystemExit(code)


# Seconds a failing rank waits, its output flushed, before MPI_Abort. MPICH's launcher
# forwards a rank's stdout/stderr through its proxy asynchronously and ends the job as soon
# as the abort reaches it: without the pause the failing rank's report was lost, whole or in
# part, in about one run of four on an idle machine (tests/distributed's "leaves" fault).
ABORT_GRACE_S = 0.5


def _abort_job(group: "_Group", code: int) -> None:
    """End every rank of the job (MPI_Abort), after giving the launcher time to forward what
    this rank has written."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken: nothing more to forward
            pass
    time.sleep(ABORT_GRACE_S)
    group.mpi.COMM_WORLD.Abort(code)


# --------------------------------------------------------------------------- waiting


class _Worker:
    """One daemon thread that makes every MPI call of the group, in submission order.

    The callers wait for its Futures with a deadline, so the MPI calls themselves can be the
    blocking ones: MPI progresses them at full speed in C, without the GIL (a polled
    non-blocking call progresses only when polled, which made small all-reduces ~50x
    slower). A call stuck on a dead peer leaves this thread blocked; the caller raises
    DistributedError and the job is aborted. Daemon, so a stuck call never blocks exit."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="anygpu-mpi", daemon=True)
        self.thread.start()

    def submit(self, call, *args) -> Future:
        future: Future = Future()
        self._jobs.put((future, call, args))
        return future

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, call, args = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(call(*args))
                except BaseException as error:  # handed to the waiting caller
                    future.set_exception(error)

    def shutdown(self) -> None:
        self._jobs.put(None)

    def drain(self, group: "_Group", what: str) -> None:
        """Wait (within the group's timeout) until every call submitted so far has run."""
        if threading.current_thread() is not self.thread:
            _await(group, self.submit(lambda: None), what)


def _settle(group: "_Group", what: str) -> None:
    """Finish this process's part of every collective already started: submit the device's
    recorded work (DistributedDataParallel's gates wait there for their exchanges) and let
    the worker run what is queued. Before leaving the group or the interpreter: a rank that
    finalized MPI while its worker was inside a collective crashed (double free in MPICH)."""
    from anygpu import ops

    if ops._default is not None:
        ops._default.flush()
    if group.executor is not None:
        group.executor.drain(group, what)


def _settle_at_exit() -> None:
    group = _group
    if group is None:
        return
    try:
        _settle(group, "exit")
    except Exception as error:  # a peer died: nothing left to finish; MPI_Abort ends the job
        sys.stderr.write(f"anygpu.distributed: at exit, rank {group.rank}: {error}\n")
        if group.size > 1:
            _abort_job(group, 1)


def _timeout_error(group: _Group, what: str, seconds: float) -> DistributedError:
    return DistributedError(
        f"{what}: the other ranks did not answer within {seconds:g} s (rank {group.rank} of "
        f"{group.size}); a rank died, hung or stopped early. Raise the limit with "
        f"ANYGPU_DIST_TIMEOUT=<seconds> or init_process_group(timeout=...)")


def _await(group: _Group, future: Future, what: str, timeout: float | None = None):
    """The result of a Future of the group's worker, waiting at most the group's timeout."""
    seconds = group.timeout if timeout is None else timeout
    try:
        return future.result(timeout=seconds)
    except FutureTimeout:
        raise _timeout_error(group, what, seconds) from None


def _run(group: _Group, call, what: str, timeout: float | None = None):
    """Run a blocking MPI call within the group's timeout (on the worker thread)."""
    if group.executor is None:  # MPI without thread support: a plain blocking call
        return call()
    if threading.current_thread() is group.executor.thread:
        return call()  # already on the worker (DistributedDataParallel's pipelined buckets)
    return _await(group, group.executor.submit(call), what, timeout)


def _mpi_op(group: _Group, op: str, what: str):
    MPI = group.mpi
    table = {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
             ReduceOp.MAX: MPI.MAX, ReduceOp.MIN: MPI.MIN}
    if op not in table:
        raise ValueError(f"{what}: op must be one of ReduceOp.{', ReduceOp.'.join(o.upper() for o in _OPS)}, "
                         f"got {op!r}")
    return table[op]


def all_reduce_array(array: np.ndarray, op: str = ReduceOp.SUM, what: str = "all_reduce") -> np.ndarray:
    """Reduce a contiguous host array across ranks, in place; returns it.

    AVG divides the sum by the world size (float arrays only)."""
    group = _need_group(what)
    mpi_op = _mpi_op(group, op, what)
    if not (isinstance(array, np.ndarray) and array.flags.c_contiguous):
        raise ValueError(f"{what}: expected a C-contiguous numpy array, got {type(array).__name__}")
    if op == ReduceOp.AVG and array.dtype.kind != "f":
        raise ValueError(f"{what}: ReduceOp.AVG needs a float tensor, got {array.dtype}")
    if group.size > 1 and array.size:
        _run(group, lambda: group.comm.Allreduce(group.mpi.IN_PLACE, array, op=mpi_op), what)
    if op == ReduceOp.AVG:
        array /= group.size
    return array


# --------------------------------------------------------------------------- tensors

_WIRE = {np.dtype(np.float16): np.float32, np.dtype(np.bool_): np.int32}  # types MPI may lack


def _check_tensor(what: str, tensor) -> None:
    from anygpu.tensor import Tensor
    if not isinstance(tensor, Tensor):
        raise ValueError(f"{what}: expected an anygpu Tensor, got {type(tensor).__name__}")


def _check_per_rank(what: str, name: str, state: _Group, items: list, like) -> None:
    """`items` must be world_size tensors of `like`'s shape (all_gather's outputs,
    reduce_scatter's inputs)."""
    if len(items) != state.size:
        raise ValueError(f"{what}: {name} must hold world_size = {state.size} tensors, got {len(items)}")
    for item in items:
        _check_tensor(what, item)
        if tuple(item.shape) != tuple(like.shape):
            raise ValueError(f"{what}: every tensor of {name} must have shape {tuple(like.shape)}, "
                             f"got {tuple(item.shape)}")


def _to_host(tensor) -> np.ndarray:
    host = np.ascontiguousarray(tensor.numpy()).reshape(-1)
    wire = _WIRE.get(host.dtype)
    return host.astype(wire) if wire is not None else host


def _write_back(tensor, host: np.ndarray) -> None:
    """Overwrite the tensor's GPU buffer in place (its identity and graph stay)."""
    tensor._buf._dev.write(tensor._buf, host.reshape(-1))  # converts back to the buffer's type
    if getattr(tensor, "_host", None) is not None:
        tensor._host = None  # index checks must not read a stale host copy


class _Work:
    """What ``async_op=True`` returns: the operation has already completed. result: the
    tensors it wrote (torch's ``Work.result()``, and the value of ``get_future()``)."""

    def __init__(self, result: list | None = None):
        self._result = [] if result is None else result

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def result(self) -> list:
        return self._result

    def get_future(self):
        """An anygpu.futures.Future, already completed with ``result()`` (``[tensor]`` for
        all_reduce and broadcast), as torch's ``Work.get_future()``."""
        from anygpu.futures import Future

        future: Future = Future()
        future.set_result(self._result)
        return future


class ProcessGroup:
    """The default process group, as torch's ``dist.group.WORLD``: anygpu has only this one.
    Collectives accept it (or None) as ``group=``."""

    def size(self) -> int:
        return get_world_size()

    def rank(self) -> int:
        return get_rank()

    def __repr__(self) -> str:
        return "anygpu.distributed.ProcessGroup(WORLD)"


class group:
    """torch's ``dist.group`` namespace: ``group.WORLD`` is the default process group."""

    WORLD = ProcessGroup()


GroupMember = group


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization: bool = False,
              group_desc=None, device_id=None) -> ProcessGroup:
    """torch's ``new_group``: a group of every rank is the default group (``group.WORLD``).
    anygpu has that one group only, so a strict subset of the ranks is refused with
    NotImplementedError (collectives would otherwise run over every rank)."""
    state = _need_group("new_group")
    if ranks is not None:
        chosen = sorted({int(r) for r in ranks})
        if any(not 0 <= r < state.size for r in chosen):
            raise ValueError(f"new_group: ranks must be in [0, {state.size}), got {list(ranks)}")
        if chosen != list(range(state.size)):
            raise NotImplementedError(f"new_group: anygpu.distributed has one process group, all {state.size} ranks; "
                                      f"a group of ranks {chosen} is not supported")
    return group.WORLD


def all_reduce(tensor, op: str = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce `tensor` across ranks in place: every rank ends with the same values.

    float32 and int32 tensors travel through the device's persistent host staging
    (runtime/staging.py): MPI reduces from the mapped download buffer straight into the
    mapped upload buffer, which one GPU copy then writes back. Other types go through numpy:
    float16 is summed in float32 and rounded to float16 once (for two ranks the very bits of
    a float16 sum; DistributedDataParallel's fp16_compress_hook sends float16 buckets)."""
    _check_tensor("all_reduce", tensor)
    state = _need_group("all_reduce")
    wire = _staged_type(tensor)
    if state.size > 1 and wire is not None:
        mpi_op = _mpi_op(state, op, "all_reduce")
        if op == ReduceOp.AVG and wire != np.float32:
            raise ValueError(f"all_reduce: ReduceOp.AVG needs a float tensor, got {np.dtype(wire)}")
        all_reduce_staged(state, tensor._buf, mpi_op, "all_reduce",
                          divide_by=state.size if op == ReduceOp.AVG else None)
        tensor._host = None  # index checks must not read a stale host copy
        return _Work([tensor]) if async_op else None
    host = _to_host(tensor)
    all_reduce_array(host, op, "all_reduce")
    _write_back(tensor, host)
    return _Work([tensor]) if async_op else None


def _staged_type(tensor):
    """The numpy type a tensor's buffer holds when it can travel through host staging, else None."""
    from anygpu.runtime import staging
    from anygpu.tensor import float32, int32

    if not staging.AVAILABLE or tensor.numel() == 0:
        return None
    return {float32: np.float32, int32: np.int32}.get(tensor.dtype)


class _SharedSlots:
    """MPI shared memory (MPI-3 ``Win.Allocate_shared``) on the host's communicator: two
    slots of `capacity` bytes per rank, every rank's slots mapped into every process.

    An all-reduce through it: each rank copies its contribution into its slot, all meet at
    a barrier, and each sums all slots itself, in rank order (so every rank gets the same
    bits). The two slots alternate between uses, so the next use's writes cannot overtake a
    slow rank still reading: it passes the next barrier only after its reads."""

    def __init__(self, group: "_Group", capacity: int):
        MPI = group.mpi
        self.capacity = capacity
        self.window = MPI.Win.Allocate_shared(2 * capacity, 1, comm=group.node)
        self.window.Lock_all(MPI.MODE_NOCHECK)
        self.views = [np.frombuffer(self.window.Shared_query(r)[0], np.uint8)[:2 * capacity]
                      for r in range(group.node.Get_size())]
        self.parity = 0

    def allreduce(self, group: "_Group", download: np.ndarray, upload: np.ndarray, n: int, ufunc,
                  scratch: np.ndarray) -> None:
        nbytes = n * download.itemsize
        start = self.parity * self.capacity
        self.parity ^= 1
        slots = [view[start:start + nbytes].view(download.dtype) for view in self.views]
        mine = slots[group.node.Get_rank()]
        _in_pieces(group, n, lambda lo, hi: np.copyto(mine[lo:hi], download[lo:hi]))
        trace("copied")
        self.window.Sync()
        group.node.Barrier()
        self.window.Sync()
        trace("barrier")

        def reduce(lo: int, hi: int) -> None:
            if len(slots) == 2:  # straight into the upload mapping
                ufunc(slots[0][lo:hi], slots[1][lo:hi], out=upload[lo:hi])
                return
            out = scratch[lo:hi]  # several ranks: summed in rank order, then moved once
            ufunc(slots[0][lo:hi], slots[1][lo:hi], out=out)
            for slot in slots[2:]:
                ufunc(out, slot[lo:hi], out=out)
            np.copyto(upload[lo:hi], out)

        _in_pieces(group, n, reduce)

    def free(self) -> None:
        self.window.Unlock_all()
        self.window.Free()


# Copies and sums of at least this many bytes per thread are split across the group's copy
# threads (init_process_group: ANYGPU_DIST_COPY_THREADS, default the host's cores per rank, at
# most 8): one thread moves about 10 GB/s between host buffers, far below a server's memory
# bandwidth, and numpy releases the GIL while it copies or adds.
PIECE_BYTES = 1 << 20  # (256 KiB pieces measured slower than one thread at 1 MiB: thread hand-offs)


def _copy_threads(local_size: int) -> int:
    text = os.environ.get("ANYGPU_DIST_COPY_THREADS")
    if text:
        try:
            return max(1, int(text))
        except ValueError:
            raise ValueError(f"ANYGPU_DIST_COPY_THREADS must be a whole number, got {text!r}") from None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cores // max(local_size, 1)))


def _in_pieces(group: "_Group", n: int, fn) -> None:
    """fn(lo, hi) over [0, n) in contiguous pieces, on the group's copy threads and this one
    (one piece here when the work is small or the group has no copy threads)."""
    pieces = min(group.copy_threads, n * 4 // PIECE_BYTES)
    if pieces <= 1 or group.copiers is None:
        fn(0, n)
        return
    step = (-(-n // pieces) + 1023) // 1024 * 1024  # whole KiB-multiples of elements
    bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    futures = []
    try:
        for lo, hi in bounds[1:]:
            futures.append(group.copiers.submit(fn, lo, hi))
    except RuntimeError:  # the interpreter is exiting: concurrent.futures takes no new work
        pass  # (its hook runs before the atexit hook that finishes the exchanges in flight)
    try:
        fn(*bounds[0])
        for lo, hi in bounds[1 + len(futures):]:
            fn(lo, hi)
    finally:
        for future in futures:
            future.result()


def _ufunc(group: "_Group", mpi_op):
    MPI = group.mpi  # mpi4py's Op objects compare equal but do not hash
    for op, ufunc in ((MPI.SUM, np.add), (MPI.PROD, np.multiply), (MPI.MAX, np.maximum), (MPI.MIN, np.minimum)):
        if mpi_op == op:
            return ufunc
    return None


def allreduce_mapped(group: _Group, download: np.ndarray, upload: np.ndarray, n: int, mpi_op,
                     send: np.ndarray, received: np.ndarray) -> None:
    """upload[:n] <- the all-reduce of every rank's download[:n] (views of mapped staging memory).

    All ranks on one host (and ANYGPU_DIST_SHARED_MEMORY not 0): through MPI shared memory
    (_SharedSlots): one copy out of the mapping, a barrier, the sum written straight into
    the upload mapping. Otherwise MPI's all-reduce through the plain host arrays
    send/received: MPICH's single-copy transfer (CMA) cannot read driver-mapped pages
    (process_vm_readv fails with EFAULT on NVIDIA's driver)."""
    ufunc = _ufunc(group, mpi_op)
    if (group.windows is not None and group.node is not None and group.local_size == group.size
            and ufunc is not None and os.environ.get("ANYGPU_DIST_SHARED_MEMORY", "1") != "0"):
        nbytes = n * download.itemsize
        capacity = 1 << max(nbytes - 1, 1).bit_length()  # a power of two: buckets of a size share one
        slots = group.windows.get(capacity)
        if slots is None:  # collective: every rank reaches this in the same exchange
            slots = group.windows[capacity] = _SharedSlots(group, capacity)
        slots.allreduce(group, download, upload, n, ufunc, received)
        return
    np.copyto(send[:n], download[:n])
    group.comm.Allreduce(send[:n], received[:n], op=mpi_op)
    np.copyto(upload[:n], received[:n])


def all_reduce_staged(group: _Group, buf, mpi_op, what: str, divide_by: int | None = None) -> None:
    """Reduce a GPU Buffer across ranks in place through its device's host staging: GPU copy
    to the mapped download buffer, MPI all-reduce into the mapped upload buffer (divided
    by `divide_by` when given), GPU copy back. The MPI call runs on the group's worker thread."""
    from anygpu.runtime.staging import stage_for

    dtype = {"f32": np.float32, "i32": np.int32}[buf.dtype]
    stage = stage_for(buf._dev, buf.nbytes)
    stage.record_download(buf)
    stage.submit()
    n = buf.len

    def work(download, upload):
        send, received = stage.host_arrays(dtype)
        allreduce_mapped(group, download, upload, n, mpi_op, send, received)
        if divide_by is not None:
            upload[:n] /= dtype(divide_by)

    _run(group, lambda: stage.exchange(work, dtype), what)
    stage.record_upload(buf)


def broadcast(tensor, src: int = 0, group=None, async_op: bool = False):
    """Copy rank `src`'s `tensor` into every rank's `tensor` (same shape everywhere), in place."""
    _check_tensor("broadcast", tensor)
    state = _need_group("broadcast")
    if not 0 <= src < state.size:
        raise ValueError(f"broadcast: src must be a rank in [0, {state.size}), got {src}")
    if state.size > 1 and _staged_type(tensor) is not None:
        _broadcast_staged(state, tensor._buf, src)
        tensor._host = None
    elif state.size > 1:
        host = _to_host(tensor)
        _run(state, lambda: state.comm.Bcast(host, root=src), "broadcast")
        if state.rank != src:
            _write_back(tensor, host)
    return _Work([tensor]) if async_op else None


def _broadcast_staged(group: _Group, buf, src: int) -> None:
    """broadcast through host staging: rank src sends its mapped download buffer, the others
    receive into their mapped upload buffer and copy it back to the GPU."""
    from anygpu.runtime.staging import stage_for

    dtype = {"f32": np.float32, "i32": np.int32}[buf.dtype]
    stage = stage_for(buf._dev, buf.nbytes)
    sending = group.rank == src
    if sending:
        stage.record_download(buf)
    stage.submit()
    n = buf.len

    def work(download, upload):  # through a host array, as allreduce_mapped explains
        host = stage.host_arrays(dtype)[0][:n]
        if sending:
            np.copyto(host, download[:n])
        group.comm.Bcast(host, root=src)
        if not sending:
            np.copyto(upload[:n], host)

    _run(group, lambda: stage.exchange(work, dtype), "broadcast")
    if not sending:
        stage.record_upload(buf)


def all_gather(tensor_list: list, tensor, group=None, async_op: bool = False):
    """tensor_list[r] <- rank r's `tensor`, on every rank (tensor_list: world_size tensors of its shape)."""
    _check_tensor("all_gather", tensor)
    state = _need_group("all_gather")
    _check_per_rank("all_gather", "tensor_list", state, tensor_list, tensor)
    host = _to_host(tensor)
    gathered = np.empty((state.size, host.size), dtype=host.dtype)
    _run(state, lambda: state.comm.Allgather(host, gathered), "all_gather")
    for item, row in zip(tensor_list, gathered):
        _write_back(item, row)
    return _Work() if async_op else None


def reduce_scatter(output, input_list: list, op: str = ReduceOp.SUM, group=None, async_op: bool = False):
    """output <- the reduction over ranks of input_list[my rank] (input_list: world_size tensors of output's shape)."""
    _check_tensor("reduce_scatter", output)
    state = _need_group("reduce_scatter")
    mpi_op = _mpi_op(state, op, "reduce_scatter")
    _check_per_rank("reduce_scatter", "input_list", state, input_list, output)
    _reduce_scatter_block(state, np.concatenate([_to_host(item) for item in input_list]), output, op, mpi_op,
                          "reduce_scatter")
    return _Work() if async_op else None


def _reduce_scatter_block(state: _Group, send: np.ndarray, output, op: str, mpi_op, what: str) -> None:
    """output <- this rank's block of the reduction over ranks of `send` (world_size blocks)."""
    if op == ReduceOp.AVG and send.dtype.kind != "f":
        raise ValueError(f"{what}: ReduceOp.AVG needs float tensors, got {send.dtype}")
    received = np.empty(send.size // state.size, dtype=send.dtype)
    _run(state, lambda: state.comm.Reduce_scatter_block(send, received, op=mpi_op), what)
    if op == ReduceOp.AVG:
        received /= state.size
    _write_back(output, received)


def _check_root(what: str, name: str, state: _Group, root) -> int:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= int(root) < state.size:
        raise ValueError(f"{what}: {name} must be a rank in [0, {state.size}), got {root!r}")
    return int(root)


def reduce(tensor, dst: int = 0, op: str = ReduceOp.SUM, group=None, async_op: bool = False):
    """Rank `dst`'s `tensor` <- the reduction over ranks of `tensor`, in place; the other
    ranks' tensors keep their values (torch leaves them unspecified)."""
    _check_tensor("reduce", tensor)
    state = _need_group("reduce")
    dst = _check_root("reduce", "dst", state, dst)
    mpi_op = _mpi_op(state, op, "reduce")
    host = _to_host(tensor)
    if op == ReduceOp.AVG and host.dtype.kind != "f":
        raise ValueError(f"reduce: ReduceOp.AVG needs a float tensor, got {host.dtype}")
    received = np.empty_like(host) if state.rank == dst else None
    _run(state, lambda: state.comm.Reduce(host, received, op=mpi_op, root=dst), "reduce")
    if received is not None:
        if op == ReduceOp.AVG:
            received /= state.size
        _write_back(tensor, received)
    return _Work() if async_op else None


def gather(tensor, gather_list: list | None = None, dst: int = 0, group=None, async_op: bool = False):
    """On rank `dst`, gather_list[r] <- rank r's `tensor` (world_size tensors of its shape);
    the other ranks pass gather_list=None."""
    _check_tensor("gather", tensor)
    state = _need_group("gather")
    dst = _check_root("gather", "dst", state, dst)
    if state.rank == dst:
        if gather_list is None:
            raise ValueError(f"gather: rank {dst} (dst) needs gather_list, {state.size} tensors of shape "
                             f"{tuple(tensor.shape)}")
        _check_per_rank("gather", "gather_list", state, gather_list, tensor)
    elif gather_list:
        raise ValueError(f"gather: only rank {dst} (dst) takes a gather_list; rank {state.rank} got "
                         f"{len(gather_list)} tensors")
    host = _to_host(tensor)
    gathered = np.empty((state.size, host.size), dtype=host.dtype) if state.rank == dst else None
    _run(state, lambda: state.comm.Gather(host, gathered, root=dst), "gather")
    if gathered is not None:
        for item, row in zip(gather_list, gathered):
            _write_back(item, row)
    return _Work() if async_op else None


def scatter(tensor, scatter_list: list | None = None, src: int = 0, group=None, async_op: bool = False):
    """`tensor` <- rank `src`'s scatter_list[my rank] (src passes world_size tensors of
    tensor's shape; the other ranks pass scatter_list=None)."""
    _check_tensor("scatter", tensor)
    state = _need_group("scatter")
    src = _check_root("scatter", "src", state, src)
    host = _to_host(tensor)
    send = None
    if state.rank == src:
        if scatter_list is None:
            raise ValueError(f"scatter: rank {src} (src) needs scatter_list, {state.size} tensors of shape "
                             f"{tuple(tensor.shape)}")
        _check_per_rank("scatter", "scatter_list", state, scatter_list, tensor)
        send = np.stack([_to_host(item) for item in scatter_list])
        if send.dtype != host.dtype:
            raise ValueError(f"scatter: scatter_list holds {send.dtype} tensors, tensor is {host.dtype}")
    elif scatter_list:
        raise ValueError(f"scatter: only rank {src} (src) takes a scatter_list; rank {state.rank} got "
                         f"{len(scatter_list)} tensors")
    received = np.empty_like(host)
    _run(state, lambda: state.comm.Scatter(send, received, root=src), "scatter")
    _write_back(tensor, received)
    return _Work() if async_op else None


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """output_tensor <- every rank's input_tensor, concatenated along the first dimension in
    rank order (or stacked: output of shape (world_size, *input.shape)), as torch's."""
    _check_tensor("all_gather_into_tensor", input_tensor)
    _check_tensor("all_gather_into_tensor", output_tensor)
    state = _need_group("all_gather_into_tensor")
    if output_tensor.numel() != state.size * input_tensor.numel() or output_tensor.dtype != input_tensor.dtype:
        raise ValueError(f"all_gather_into_tensor: output_tensor must hold world_size = {state.size} times the "
                         f"input's {input_tensor.numel()} {input_tensor.dtype} elements, got "
                         f"{output_tensor.numel()} {output_tensor.dtype}")
    host = _to_host(input_tensor)
    gathered = np.empty((state.size, host.size), dtype=host.dtype)
    _run(state, lambda: state.comm.Allgather(host, gathered), "all_gather_into_tensor")
    _write_back(output_tensor, gathered)
    return _Work([output_tensor]) if async_op else None


def reduce_scatter_tensor(output, input, op: str = ReduceOp.SUM, group=None, async_op: bool = False):
    """output <- rank r's block of the reduction over ranks of `input` (world_size blocks of
    output's size along the first dimension), as torch's."""
    _check_tensor("reduce_scatter_tensor", output)
    _check_tensor("reduce_scatter_tensor", input)
    state = _need_group("reduce_scatter_tensor")
    mpi_op = _mpi_op(state, op, "reduce_scatter_tensor")
    if input.numel() != state.size * output.numel() or input.dtype != output.dtype:
        raise ValueError(f"reduce_scatter_tensor: input must hold world_size = {state.size} times the output's "
                         f"{output.numel()} {output.dtype} elements, got {input.numel()} {input.dtype}")
    _reduce_scatter_block(state, _to_host(input), output, op, mpi_op, "reduce_scatter_tensor")
    return _Work([output]) if async_op else None


# Object collectives, as torch's: any picklable Python object, pickled by mpi4py. Like torch's,
# they unpickle what the other ranks of this job send (trusted peers, never a file or a stranger).

def all_gather_object(object_list: list, obj, group=None) -> None:
    """object_list[r] <- rank r's `obj`, on every rank (object_list: world_size entries)."""
    state = _need_group("all_gather_object")
    if not isinstance(object_list, list) or len(object_list) != state.size:
        raise ValueError(f"all_gather_object: object_list must be a list of world_size = {state.size} entries, got "
                         f"{len(object_list) if isinstance(object_list, list) else type(object_list).__name__}")
    object_list[:] = _run(state, lambda: state.comm.allgather(obj), "all_gather_object")


def broadcast_object_list(object_list: list, src: int = 0, group=None, device=None) -> None:
    """object_list's entries <- rank src's, in place on every rank (the same length everywhere)."""
    state = _need_group("broadcast_object_list")
    src = _check_root("broadcast_object_list", "src", state, src)
    if not isinstance(object_list, list):
        raise ValueError(f"broadcast_object_list: object_list must be a list, got {type(object_list).__name__}")
    got = _run(state, lambda: state.comm.bcast(object_list if state.rank == src else None, root=src),
               "broadcast_object_list")
    if len(got) != len(object_list):
        raise ValueError(f"broadcast_object_list: rank {src} sent {len(got)} objects, this rank's list has "
                         f"{len(object_list)}")
    object_list[:] = got


def gather_object(obj, object_gather_list: list | None = None, dst: int = 0, group=None) -> None:
    """Rank dst's object_gather_list[r] <- rank r's `obj` (the other ranks pass None)."""
    state = _need_group("gather_object")
    dst = _check_root("gather_object", "dst", state, dst)
    if state.rank == dst and (not isinstance(object_gather_list, list) or len(object_gather_list) != state.size):
        raise ValueError(f"gather_object: rank {dst} needs object_gather_list, a list of world_size = {state.size} "
                         f"entries")
    got = _run(state, lambda: state.comm.gather(obj, root=dst), "gather_object")
    if state.rank == dst:
        assert object_gather_list is not None
        object_gather_list[:] = got


def scatter_object_list(scatter_object_output_list: list, scatter_object_input_list: list | None = None,
                        src: int = 0, group=None) -> None:
    """scatter_object_output_list[0] <- rank src's scatter_object_input_list[my rank]."""
    state = _need_group("scatter_object_list")
    src = _check_root("scatter_object_list", "src", state, src)
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise ValueError("scatter_object_list: scatter_object_output_list must be a list of at least one entry")
    if state.rank == src and (not isinstance(scatter_object_input_list, list)
                              or len(scatter_object_input_list) != state.size):
        raise ValueError(f"scatter_object_list: rank {src} needs scatter_object_input_list, a list of world_size = "
                         f"{state.size} objects")
    got = _run(state, lambda: state.comm.scatter(scatter_object_input_list if state.rank == src else None, root=src),
               "scatter_object_list")
    scatter_object_output_list[0] = got


def get_default_backend_for_device(device) -> str:
    """torch's backend name for a device type: "nccl" for GPUs (anygpu's adapters are
    "cuda" devices), "gloo" for "cpu"; init_process_group takes both and uses MPI."""
    from anygpu.placement import device as make_device

    kind = device.type if hasattr(device, "type") else make_device(device).type
    return "gloo" if kind == "cpu" else "nccl"


def get_backend(group=None) -> str:
    """The process group's transport: always "mpi" (what "nccl"/"gloo" mean here)."""
    _need_group("get_backend")
    return "mpi"


def is_mpi_available() -> bool:
    return is_available()


def is_nccl_available() -> bool:
    """False: anygpu has no NCCL; init_process_group("nccl") still works and means MPI."""
    return False


def is_gloo_available() -> bool:
    """False: anygpu has no gloo; init_process_group("gloo") still works and means MPI."""
    return False


def is_torchelastic_launched() -> bool:
    return False


def barrier(group=None, async_op: bool = False):
    """Wait until every rank reaches this point (bounded by the group's timeout)."""
    state = _need_group("barrier")
    if state.size > 1:
        _run(state, state.comm.Barrier, "barrier")
    return _Work() if async_op else None


def all_gather_numbers(values) -> np.ndarray:
    """Every rank's `values` (a sequence of k numbers): float64 array (world_size, k)."""
    state = _need_group("all_gather_numbers")
    local = np.ascontiguousarray(np.asarray(values, dtype=np.float64).reshape(-1))
    gathered = np.empty((state.size, local.size), dtype=np.float64)
    _run(state, lambda: state.comm.Allgather(local, gathered), "all_gather_numbers")
    return gathered


def all_gather_strings(text: str) -> list[str]:
    """Every rank's `text` (at most 256 UTF-8 bytes kept), in rank order. No pickling."""
    state = _need_group("all_gather_strings")
    local = np.zeros(_STRING_BYTES, dtype=np.uint8)
    data = text.encode()[:_STRING_BYTES]
    local[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    gathered = np.empty((state.size, _STRING_BYTES), dtype=np.uint8)
    _run(state, lambda: state.comm.Allgather(local, gathered), "all_gather_strings")
    return [bytes(row).rstrip(b"\0").decode(errors="replace") for row in gathered]
