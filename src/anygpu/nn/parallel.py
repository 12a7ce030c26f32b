"""anygpu.nn.parallel.DistributedDataParallel: one model replica per process, gradients averaged.

How a step runs on N ranks (see anygpu.distributed for the process group):

1. At construction rank 0's parameters and buffers are broadcast, so every replica starts equal.
2. Each rank runs forward and backward on its own batch.
3. During backward (``anygpu.tensor.grad_ready_hooks``) the gradients are averaged across
   ranks in flat buckets (about ``bucket_cap_mb`` each, last layers first): as soon as a
   bucket's gradients are final its GPU copy into persistent host staging
   (runtime/staging.py) is submitted and the process group's worker thread maps it and runs
   the MPI all-reduce while Python records the rest of backward. When backward ends, DDP
   records, per bucket, the upload of its sum and the cut of the averages into the
   parameters' ``.grad`` -- behind a gate, so it does not wait for the reduction (below).
4. The optimizer steps on identical gradients, so the replicas stay identical.

With the mean loss of a batch of b samples on each rank, the result equals one process
training on the N*b samples. ``weight_by_samples=True`` weights each rank's gradient by its
batch size instead of 1/N, which keeps that equality when ranks get different batch sizes
(uneven last batches, or ``balance="throughput"``).

Nothing waits at the end of backward: each bucket's upload is recorded behind a gate
(runtime Device.gate), so Python records the optimizer step and the next forward while
MPI reduces, and the GPU gets that work once the sums are there (docs/DISTRIBUTED.md,
"How the gradients travel").
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref

import numpy as np

from anygpu.tensor import Tensor, float32, grad_ready_hooks, is_grad_enabled, post_backward_hooks

from .modules import Module

__all__ = ["DistributedDataParallel", "DataParallel", "data_parallel"]

# The bucket backward completes last (the first layers) holds at most this many bytes
# (ANYGPU_DDP_LAST_BUCKET_MB, default 1; 0: no smaller last bucket, every bucket at the cap).
LAST_BUCKET_BYTES = int(float(os.environ.get("ANYGPU_DDP_LAST_BUCKET_MB") or 1.0) * (1 << 20))

_live: "weakref.WeakSet[DistributedDataParallel]" = weakref.WeakSet()


def _after_backward(leaves) -> None:
    """Tensor.backward's hook: every armed DDP whose parameters got gradients syncs them
    (waiting for the buckets its backward already started)."""
    if not _live:
        return
    ids = {id(leaf) for leaf in leaves}
    for ddp in list(_live):
        if ddp._armed and (ddp._round is not None or any(id(p) in ids for p in ddp._params)):
            ddp._armed = False
            ddp.sync_gradients()


def _grad_ready(leaf) -> None:
    """Tensor.backward's gradient-ready hook: armed DDPs start reducing complete buckets."""
    for ddp in list(_live):
        if ddp._armed:
            ddp._on_grad_ready(leaf)


class _Round:
    """One reduction of all buckets: the weight sent, what is still missing, how many started."""

    __slots__ = ("weight", "weight_buf", "remaining", "launched")

    def __init__(self, weight: float, weight_buf, remaining: list[int]):
        self.weight = weight
        self.weight_buf = weight_buf
        self.remaining = remaining  # per bucket: parameters whose gradient is not final yet
        self.launched = 0  # buckets launched, in order (every rank reduces them in the same order)


class _Exchange:
    """One bucket's trip through the host: `start` (once the bucket's download copies are
    submitted) hands map, all-reduce and unmap to the process group's worker thread;
    `wait` takes the result. One per bucket for the wrapper's life, so a captured step
    (anygpu.compile) replays the very same calls at its host points (runtime/capture.py)."""

    __slots__ = ("group", "stage", "n", "stats", "future", "times", "name")

    def __init__(self, group, stage, n: int, stats: dict, name: str = ""):
        self.group, self.stage, self.n, self.stats, self.name = group, stage, n, stats, name
        self.future = None
        self.times = None

    def _run(self):
        from anygpu.distributed.process_group import allreduce_mapped, trace

        group, n = self.group, self.n
        send, received = self.stage.host_arrays(np.float32)
        trace(f"run {self.name}")

        def work(download, upload):
            trace("mapped")
            allreduce_mapped(group, download, upload, n, group.mpi.SUM, send, received)
            trace("summed")

        self.stage.exchange(work)
        trace("unmapped")
        return self.stage.times

    def start(self) -> None:
        from anygpu.distributed.process_group import trace

        trace(f"call {self.name}")
        if self.group.executor is not None:
            self.future = self.group.executor.submit(self._run)
        else:  # MPI without thread support: a plain blocking exchange
            self.times = self._run()

    def ready(self) -> bool:
        return self.future is None or self.future.done()

    def notify(self, callback) -> None:
        """callback() once the exchange has ended without error, on the thread that ended it
        (or here, now, if it has): a replay submits its deferred tail from there (Device.gate)."""
        future = self.future
        if future is None:
            callback()
            return
        future.add_done_callback(lambda done: done.exception() is None and callback())

    def wait(self) -> None:
        from anygpu.distributed.process_group import _await

        from anygpu.distributed.process_group import trace

        waited = time.perf_counter()
        trace(f"wait {self.name}")
        if self.future is not None:
            future, self.future = self.future, None
            self.times = _await(self.group, future, "DistributedDataParallel gradient all-reduce")
        trace(f"open {self.name}")
        times, self.times = self.times, None
        if times is not None:
            self.stats["map_seconds"] += times["map"]
            self.stats["mpi_seconds"] += times["work"]
        self.stats["wait_seconds"] += time.perf_counter() - waited


if _after_backward not in post_backward_hooks:
    post_backward_hooks.append(_after_backward)


def _hook_value(future, index: int, size: int) -> Tensor:
    """The float32 Tensor of `size` elements a communication hook's Future holds (a list of
    one Tensor, which older torch releases took, is accepted too)."""
    what = "DistributedDataParallel communication hook"
    if not callable(getattr(future, "wait", None)):
        raise ValueError(f"{what}: the hook must return a Future (anygpu.futures.Future, e.g. "
                         f"all_reduce(..., async_op=True).get_future()), got {type(future).__name__}")
    value = future.wait()
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if not isinstance(value, Tensor) or value.numel() != size:
        got = f"a Tensor of shape {tuple(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
        raise ValueError(f"{what}: the Future of bucket {index} must hold a Tensor of the bucket's {size} "
                         f"elements, got {got}")
    return value if value.dtype == float32 else value.float()


def _batch_size(args, kwargs) -> int:
    for value in (*args, *kwargs.values()):
        shape = getattr(value, "shape", None)
        if shape:
            return int(shape[0])
    return 0


def _flat_gradients(dev, bucket, size: int):
    """A Buffer of `size` floats holding the bucket's gradients at their offsets (zeros where
    a parameter got no gradient)."""
    flat = dev.alloc(size)
    for p, offset in bucket:
        if p.grad is not None:
            dev.copy(p.grad._buf, flat, p.numel(), dst_offset=offset)
    return flat


def _cut_into_grads(dev, bucket, buf) -> None:
    """Each parameter's ``.grad`` <- its part of the flat Buffer `buf`, in a fresh buffer (a
    gradient buffer may be shared with other tensors of the graph)."""
    for p, offset in bucket:
        p.grad = Tensor(dev.copy(buf, None, p.numel(), src_offset=offset), p.shape)


class DistributedDataParallel(Module):
    """Data-parallel wrapper with torch's name and arguments.

    module: the model (its state dict appears under ``module.``, as in torch).
    bucket_cap_mb: size of one flat gradient bucket, in MiB.
    broadcast_buffers: broadcast rank 0's buffers (BatchNorm statistics) at every forward.
    weight_by_samples: average gradients weighted by each rank's batch size (the first
        dimension of forward's first tensor argument, summed over forwards since the last
        sync, or ``sync_gradients(samples=...)``) instead of plainly.
    balance: None, or "throughput": time each rank's steps (forward to gradients ready,
        waiting for other ranks excluded) over ``balance_steps`` steps after one warm-up step,
        then split ``global_batch_size`` in proportion to measured speed. Read this rank's
        share from ``local_batch_size`` / ``batch_offset`` before each step. Implies
        weight_by_samples.
    init_sync: broadcast rank 0's parameters and buffers at construction (default, as torch).
    device_ids, output_device, find_unused_parameters, check_reduction, gradient_as_bucket_view,
        static_graph: accepted for torch compatibility; each process uses its own adapter, a
        parameter that got no gradient on a rank counts as zero there, and gradients are
        always fresh buffers (the buckets are separate staging memory).
    dim must be 0 and process_group None (one process per device, one process group).
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, init_sync: bool = True, process_group=None,
                 bucket_cap_mb: float | None = 25.0, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 *, weight_by_samples: bool = False, balance: str | None = None,
                 global_batch_size: int | None = None, balance_steps: int = 4):
        super().__init__()
        if dim != 0:
            raise ValueError(f"DistributedDataParallel: dim must be 0 (one process per device; inputs are not "
                             f"scattered), got {dim!r}")
        if process_group is not None:
            raise ValueError("DistributedDataParallel: process_group must be None (anygpu has one process group, "
                             "the default one)")
        if bucket_cap_mb is None:  # torch's default
            bucket_cap_mb = 25.0
        from anygpu import distributed as dist

        if not isinstance(module, Module):
            raise ValueError(f"DistributedDataParallel: expected an nn.Module, got {type(module).__name__}")
        if not dist.is_initialized():
            raise RuntimeError("DistributedDataParallel: the default process group is not initialized; call "
                               "anygpu.distributed.init_process_group() first")
        if not bucket_cap_mb > 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        if balance not in (None, "throughput"):
            raise ValueError(f"DistributedDataParallel: balance must be None or 'throughput', got {balance!r}")
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.require_backward_grad_sync = True
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.weight_by_samples = bool(weight_by_samples or balance)
        self.balance = balance
        if balance is not None:
            if global_batch_size is None or int(global_batch_size) < self.world_size:
                raise ValueError(f"DistributedDataParallel: balance='throughput' needs global_batch_size of at "
                                 f"least world_size = {self.world_size}, got {global_batch_size}")
            if int(balance_steps) < 1:
                raise ValueError(f"DistributedDataParallel: balance_steps must be >= 1, got {balance_steps}")
        self.global_batch_size = None if global_batch_size is None else int(global_batch_size)
        self.balance_steps = int(balance_steps)
        self.batch_sizes = (dist.split_batch(self.global_batch_size, world_size=self.world_size)
                            if self.global_batch_size is not None else None)
        self.rank_speeds: list[float] | None = None  # samples/s per rank, once measured
        self.last_compute_seconds = 0.0
        self._per_sample_seconds: list[float] = []
        self._syncs = 0
        self._samples = 0
        self._armed = False
        self._step_started: float | None = None
        self._last_sync_end = time.perf_counter()
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._buckets = self._make_buckets(float(bucket_cap_mb) * (1 << 20))
        self._sizes = [bucket[-1][1] + bucket[-1][0].numel() for bucket in self._buckets]
        self._bucket_of = {id(p): index for index, bucket in enumerate(self._buckets) for p, _ in bucket}
        self._stages: list = [None] * len(self._buckets)  # per bucket: runtime.staging.HostStage
        self._uploads: list = [None] * len(self._buckets)  # per bucket: GPU Buffer the result lands in
        self._exchanges: list = [None] * len(self._buckets)  # per bucket: its _Exchange
        self._round: _Round | None = None
        # the .grad Tensors the last sync produced, with their versions (backward accumulates
        # into an existing .grad in place, as torch: the same Tensor, a newer version)
        self._synced: list | None = None
        self._defer = True  # False: wait for the sums at the end of backward (benchmarks/distributed.py --no-defer)
        # register_comm_hook: (hook, state), and whether the hook is run (False for allreduce_hook,
        # which is what the buckets do anyway: the overlapped path stays).
        self._comm_hook: tuple | None = None
        self._runs_hook = False
        # Seconds spent, summed over syncs: waiting for the GPU and the mappings (map), in the MPI
        # all-reduce (mpi) -- both on the worker thread -- and the caller blocked on them (wait).
        self.stats = {"rounds": 0, "map_seconds": 0.0, "mpi_seconds": 0.0, "wait_seconds": 0.0}
        if init_sync:
            self._broadcast_state(include_parameters=True)
        _live.add(self)
        if self.world_size > 1 and _grad_ready not in grad_ready_hooks:
            grad_ready_hooks.append(_grad_ready)

    # ------------------------------------------------------------------ torch's surface

    def forward(self, *args, **kwargs):
        if self._step_started is None:
            self._step_started = time.perf_counter()
        if self.broadcast_buffers and self.world_size > 1 and self.module.training:
            self._broadcast_state(include_parameters=False)
        if is_grad_enabled():
            self._samples += _batch_size(args, kwargs)
            if self.require_backward_grad_sync:
                self._armed = True
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate local gradients only; the first backward after
        it averages everything accumulated."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def register_comm_hook(self, state: object, hook) -> None:
        """torch's communication hook: ``hook(state, bucket) -> Future`` decides how each
        bucket of gradients (an ``anygpu.distributed.GradBucket``) is reduced; the Future's
        value, a Tensor of the bucket's size, becomes the gradients (sums stay sums: divide
        by the world size in the hook, as the default hooks do). Call it once, before
        training; a second call raises RuntimeError, as torch's.

        ``default_hooks.allreduce_hook`` keeps the built-in path (buckets reduced while
        backward runs, nothing waited for after it, captured by anygpu.compile). Any other
        hook runs at the end of backward, bucket by bucket in order (the same order on every
        rank), with the ranks' gradients final; ``anygpu.compile`` leaves such steps eager
        (``reason()`` says so). A hook runs on a single rank too, as in torch."""
        if not callable(hook):
            raise TypeError("Communication hook must be callable.")
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
        from anygpu.distributed.algorithms.ddp_comm_hooks import default_hooks

        runs = hook is not default_hooks.allreduce_hook
        if runs and self.weight_by_samples:
            raise ValueError("DistributedDataParallel.register_comm_hook: a communication hook decides how gradients "
                             "are averaged; it cannot be combined with weight_by_samples or balance='throughput'")
        self._comm_hook, self._runs_hook = (hook, state), runs

    def _hook_round(self) -> None:
        """Run the registered hook on every bucket, in order, and cut each Future's value
        into the parameters' ``.grad`` (zeros stand for a gradient a parameter did not get)."""
        from anygpu.distributed.grad_bucket import GradBucket
        from anygpu.ops import gpu
        from anygpu.runtime.capture import paused
        from anygpu.tensor import no_grad

        assert self._comm_hook is not None
        hook, state = self._comm_hook
        dev = gpu()
        recording = dev._recording
        if recording is not None and recording.unsupported is None:  # anygpu.compile: left eager, with this reason
            recording.unsupported = ("a DistributedDataParallel communication hook other than allreduce_hook (Python "
                                     "that runs on every step)")
        count = len(self._buckets)
        for index, bucket in enumerate(self._buckets):
            size = self._sizes[index]
            grad_bucket = GradBucket(index, count, Tensor(_flat_gradients(dev, bucket, size), (size,)),
                                     [p for p, _ in bucket], [offset for _, offset in bucket])
            with paused(dev), no_grad():  # the hook's reads do not hide the reason above
                value = _hook_value(hook(state, grad_bucket), index, size)
            _cut_into_grads(dev, bucket, value._buf)
        self.stats["rounds"] += 1

    # ------------------------------------------------------------------ balancing

    @property
    def local_batch_size(self) -> int:
        """This rank's share of global_batch_size (needs global_batch_size)."""
        if self.batch_sizes is None:
            raise ValueError("DistributedDataParallel: local_batch_size needs global_batch_size")
        return self.batch_sizes[self.rank]

    @property
    def batch_offset(self) -> int:
        """Where this rank's share starts within a global batch."""
        if self.batch_sizes is None:
            raise ValueError("DistributedDataParallel: batch_offset needs global_batch_size")
        return sum(self.batch_sizes[: self.rank])

    def _measure(self, samples: int) -> None:
        from anygpu import distributed as dist

        self._syncs += 1
        if self.balance is None or self.rank_speeds is not None or self._syncs == 1:  # step 1: compiling
            return
        self._per_sample_seconds.append(self.last_compute_seconds / max(samples, 1))
        if len(self._per_sample_seconds) < self.balance_steps:
            return
        mine = float(np.median(self._per_sample_seconds))
        seconds = dist.all_gather_numbers([mine])[:, 0]
        self.rank_speeds = [1.0 / max(s, 1e-9) for s in seconds]
        self.batch_sizes = dist.split_batch(self.global_batch_size, self.rank_speeds)

    # ------------------------------------------------------------------ gradients

    def _make_buckets(self, cap_bytes: float) -> list[list[tuple[Tensor, int]]]:
        """Parameters cut into buckets of about cap_bytes, in the order backward completes
        them (last layers first): lists of (parameter, offset in the bucket).

        The first layers' bucket is completed last, when nothing of backward is left to hide
        its reduction behind, so it is cut at LAST_BUCKET_BYTES (when smaller than the cap);
        the other buckets may overlap with the GPU still running the rest of backward."""
        chunks: list[list[Tensor]] = []  # forward order
        current: list[Tensor] = []
        filled, limit = 0, min(cap_bytes, LAST_BUCKET_BYTES) if LAST_BUCKET_BYTES > 0 else cap_bytes
        for p in self._params:
            if current and (filled + p.numel()) * 4 > limit:
                chunks.append(current)
                current, filled, limit = [], 0, cap_bytes
            current.append(p)
            filled += p.numel()
        if current:
            chunks.append(current)
        buckets: list[list[tuple[Tensor, int]]] = []
        for chunk in reversed(chunks):
            bucket, offset = [], 0
            for p in reversed(chunk):
                bucket.append((p, offset))
                offset += p.numel()
            buckets.append(bucket)
        return buckets

    def arm(self, samples: int | None = None) -> None:
        """Make the next backward reduce this model's gradients while it runs, as a forward
        through the wrapper does; for loops that call the wrapped module directly (``anygpu
        train``). samples: this rank's batch size (for weight_by_samples)."""
        if self._step_started is None:
            self._step_started = time.perf_counter()
        if samples is not None:
            self._samples = int(samples)
        if self.require_backward_grad_sync:
            self._armed = True

    def _overlaps(self) -> bool:
        # Balancing times each rank's own work first: no reduction may run during those steps.
        return self.world_size > 1 and not (self.balance is not None and self.rank_speeds is None)

    def _on_grad_ready(self, leaf) -> None:
        """grad_ready_hooks: `leaf`'s gradient is final; launch every bucket now complete, in order."""
        index = self._bucket_of.get(id(leaf))
        if index is None or self._runs_hook or not self._overlaps():
            return
        state = self._round if self._round is not None else self._start_round(self._samples)
        state.remaining[index] -= 1
        while state.launched < len(self._buckets) and state.remaining[state.launched] <= 0:
            self._launch(state)

    def _start_round(self, count: int) -> "_Round":
        from anygpu.ops import gpu

        if self.weight_by_samples and count <= 0:
            raise ValueError("DistributedDataParallel: weight_by_samples needs this rank's batch size; "
                             "call the wrapper's forward, arm(samples=...) or sync_gradients(samples=...)")
        # Each bucket travels with one extra element: this rank's weight (its sample count, or
        # 1), so the summed weight arrives with the summed gradients and no other collective is
        # needed. Gradients are multiplied by the weight before the sum, divided by the sum after.
        weight = float(count) if self.weight_by_samples else 1.0
        self._round = _Round(weight, gpu().upload(np.array([weight], np.float32)),
                             [len(bucket) for bucket in self._buckets])
        return self._round

    def _launch(self, state: "_Round") -> None:
        """Copy bucket `state.launched` into its download buffer, submit, and hand the mapping
        and the all-reduce to the process group's worker thread."""
        from anygpu.distributed.process_group import _need_group
        from anygpu.ops import gpu
        from anygpu.runtime.staging import HostStage

        index = state.launched
        state.launched += 1
        dev = gpu()
        bucket, size = self._buckets[index], self._sizes[index]
        if self._stages[index] is None:
            self._stages[index] = HostStage(dev, (size + 1) * 4)
            self._uploads[index] = dev.empty(size + 1)
            self._exchanges[index] = _Exchange(_need_group("DistributedDataParallel"), self._stages[index],
                                               size + 1, self.stats, f"bucket {index}")
        stage = self._stages[index]
        if state.weight != 1.0 or any(p.grad is None for p, _ in bucket):
            flat = _flat_gradients(dev, bucket, size)
            if state.weight != 1.0:
                flat = (Tensor(flat, (size,)) * state.weight)._buf
            stage.record_download(flat, 0, size)
        else:
            for p, offset in bucket:
                stage.record_download(p.grad._buf, offset * 4, p.numel())
        stage.record_download(state.weight_buf, size * 4, 1)
        dev.host_call(self._exchanges[index].start)

    def _finish(self, state: "_Round", defer: bool) -> None:
        """Launch the buckets not launched yet and record, per bucket, the upload of its sum
        and the cut of the averages into the parameters' ``.grad``.

        Each upload is recorded behind a gate (runtime Device.gate) on its exchange. defer:
        Python goes on recording (the optimizer step, the next forward) while MPI reduces,
        and the recorded work is submitted once the sums have arrived; reading a gradient (or
        anything recorded after it) waits for them, as a flush does. Otherwise this waits
        for every bucket before returning."""
        from anygpu.ops import gpu

        while state.launched < len(self._buckets):
            self._launch(state)
        dev = gpu()
        for index in range(len(self._buckets)):
            exchange = self._exchanges[index]
            dev.gate(exchange.ready, exchange.wait, exchange.notify)
            size = self._sizes[index]
            stage, flat = self._stages[index], self._uploads[index]
            stage.record_upload(flat, 0, size + 1)
            summed = Tensor(flat, (size + 1,))
            # The divisor is the summed weight, the bucket's last element: world_size when
            # every rank sends 1 (exact in float32), else known only on the GPU.
            averaged = summed / summed[size] if self.weight_by_samples else summed * (1.0 / self.world_size)
            _cut_into_grads(dev, self._buckets[index], averaged._buf)
        if not defer:
            dev.flush()  # waits at the gates
        self.stats["rounds"] += 1
        self._round = None

    def _grads_now(self) -> list:
        return [(p.grad, None if p.grad is None else p.grad._version) for p in self._params]

    def sync_gradients(self, samples: int | None = None) -> None:
        """Average the parameters' gradients across ranks now. A backward after a forward
        through the wrapper (or after `arm`) does it by itself, reducing buckets while it
        runs; call it when the forward bypassed the wrapper. Calling it again before the
        next forward or `arm` does nothing.

        samples: this rank's batch size for weight_by_samples (default: counted by forward)."""
        from anygpu.ops import gpu

        count = int(samples) if samples is not None else self._samples
        if self._round is not None and self.weight_by_samples and self._round.weight != float(count):
            raise ValueError(f"DistributedDataParallel: sync_gradients(samples={count}) after a backward that "
                             f"already started reducing with {self._round.weight:g} samples")
        self._armed = False
        if self._round is None and self._synced is not None and all(
                p.grad is grad and (grad is None or grad._version == version)
                for p, (grad, version) in zip(self._params, self._synced)):
            return  # no backward since the last sync: already averaged
        self._samples = 0
        started = self._step_started if self._step_started is not None else self._last_sync_end
        self._step_started = None
        if self.weight_by_samples and count <= 0:
            raise ValueError("DistributedDataParallel: weight_by_samples needs this rank's batch size; "
                             "call the wrapper's forward or pass sync_gradients(samples=...)")
        if self._runs_hook:  # the registered hook reduces each bucket (on one rank too, as torch)
            self.last_compute_seconds = time.perf_counter() - started
            self._hook_round()
            self._synced = self._grads_now()
            self._last_sync_end = time.perf_counter()
            return
        if self.world_size == 1:  # one replica: its gradients are already the average
            self.last_compute_seconds = time.perf_counter() - started
            self._measure(count)
            self._last_sync_end = time.perf_counter()
            return
        state = self._round
        if state is None:
            if not self._overlaps():  # balancing: this rank's own work ends when its GPU is done
                gpu().synchronize()
            self.last_compute_seconds = time.perf_counter() - started
            state = self._start_round(count)
        else:
            self.last_compute_seconds = time.perf_counter() - started
        self._finish(state, defer=self._defer and self._overlaps())
        self._synced = self._grads_now()
        self._measure(count)
        self._last_sync_end = time.perf_counter()

    # ------------------------------------------------------------------ start-up

    def _broadcast_state(self, include_parameters: bool) -> None:
        """Overwrite this replica's parameters (optionally) and buffers with rank 0's, in place."""
        from anygpu import distributed as dist
        from anygpu.ops import gpu

        if self.world_size == 1:
            return
        tensors = list(self.module.parameters()) if include_parameters else []
        tensors += [b for b in self.module.buffers() if b is not None]
        floats = [t for t in tensors if t.dtype == float32]
        for t in tensors:
            if t.dtype != float32:
                dist.broadcast(t, src=0)
        if not floats:
            return
        dev = gpu()
        offsets, total = [], 0
        for t in floats:
            offsets.append(total)
            total += t.numel()
        flat = dev.empty(total)
        for t, offset in zip(floats, offsets):
            dev.copy(t._buf, flat, t.numel(), dst_offset=offset)
        flat_tensor = Tensor(flat, (total,))
        dist.broadcast(flat_tensor, src=0)
        if self.rank != 0:
            for t, offset in zip(floats, offsets):
                dev.copy(flat, t._buf, t.numel(), src_offset=offset)


# ---------------------------------------------------------------------- DataParallel (single process)

def _device_index(op: str, value, name: str) -> int:
    """An adapter index from an int, "cuda:N" or a device (torch's _get_device_index), checked
    against the adapters wgpu sees."""
    from anygpu import placement

    if isinstance(value, bool):
        raise ValueError(f"{op}: {name} must be a device index or device, got {value!r}")
    if isinstance(value, int):
        index = value
    else:
        try:
            parsed = value if isinstance(value, placement.device) else placement.device(value)
        except ValueError as exc:
            raise ValueError(f"{op}: {name}: {exc}") from None
        if parsed.type == "cpu":
            raise ValueError(f"{op}: {name} must name a GPU adapter, got {parsed}")
        index = placement.current_index() if parsed.index is None else parsed.index
    count = placement.adapter_count()
    if not 0 <= index < count:
        raise ValueError(f"{op}: {name} = {value!r} is not an adapter index; wgpu sees {count} adapter(s) "
                         f"(0..{count - 1})")
    return index


def _data_parallel_devices(op: str, device_ids, output_device, dim) -> tuple[list[int], int]:
    """Check torch's DataParallel arguments; the devices the batch would be split over, and
    the output device. anygpu computes on one adapter per process (placement.py), so the
    whole batch runs on the process's adapter, which must be device_ids[0]: with more than
    one device a warning says so once."""
    import warnings

    from anygpu import placement

    if isinstance(dim, bool) or not isinstance(dim, int):
        raise ValueError(f"{op}: dim must be an int, got {dim!r}")
    if device_ids is None:
        ids = list(range(placement.adapter_count()))
        ids = [placement.current_index()] + [i for i in ids if i != placement.current_index()]
    else:
        ids = [_device_index(op, d, f"device_ids[{k}]") for k, d in enumerate(device_ids)]
        if not ids:
            raise ValueError(f"{op}: device_ids is empty; give at least one adapter index or None for all")
        if len(set(ids)) != len(ids):
            raise ValueError(f"{op}: device_ids {list(device_ids)} names an adapter twice")
    if output_device is None:
        output = ids[0]
    elif _is_cpu(output_device):  # torch gathers to the host; anygpu's "cpu" tensors live on the adapter
        output = -1
    else:
        output = _device_index(op, output_device, "output_device")
    placement.select_adapter(ids[0], op)  # the module lives on device_ids[0], as in torch
    if output not in (-1, ids[0]):
        placement.select_adapter(output, op)
    if len(ids) > 1 and not _DATA_PARALLEL_WARNED:
        _DATA_PARALLEL_WARNED.append(True)
        warnings.warn(f"{op}: anygpu computes on one adapter per process, so the whole batch runs on adapter "
                      f"{ids[0]} rather than split over adapters {ids}; for several GPUs run one process each "
                      f"with DistributedDataParallel (mpiexec -n N)", stacklevel=3)
    return ids, output


_DATA_PARALLEL_WARNED: list = []


def _is_cpu(value) -> bool:
    """torch's output_device=-1 or a "cpu" device."""
    from anygpu import placement

    if isinstance(value, int) and not isinstance(value, bool):
        return value == -1
    try:
        return (value if isinstance(value, placement.device) else placement.device(value)).type == "cpu"
    except (TypeError, ValueError):
        return False


class DataParallel(Module):
    """torch.nn.DataParallel(module, device_ids=None, output_device=None, dim=0).

    torch replicates the module on each of device_ids, splits the batch along `dim`, runs the
    parts and concatenates the outputs on output_device. anygpu computes on one adapter per
    process, so forward runs the module on the whole batch on that adapter: torch's own
    behaviour with a single device (``module(*inputs, **kwargs)``). With several adapters
    listed it warns once and does the same; outputs and gradients equal the split run's
    except for layers whose result depends on the batch split (BatchNorm's training
    statistics are per part in torch). For several GPUs use DistributedDataParallel.
    output_device -1 or "cpu" (torch: gather to the host) is accepted: anygpu's "cpu" tensors
    live on the adapter (placement.py). The module is ``.module``; the state dict's keys start
    with ``module.``, as torch's."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0):
        super().__init__()
        if not isinstance(module, Module):
            raise ValueError(f"DataParallel: expected an nn.Module, got {type(module).__name__}")
        self.device_ids, self.output_device = _data_parallel_devices("DataParallel", device_ids, output_device,
                                                                     dim)
        self.dim = dim
        self.module = module

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def data_parallel(module, inputs, device_ids=None, output_device=None, dim: int = 0, module_kwargs=None):
    """torch.nn.parallel.data_parallel: the functional DataParallel (see DataParallel): the
    module applied to `inputs` (a tuple of arguments, or one argument) and module_kwargs."""
    if not callable(module):
        raise ValueError(f"data_parallel: expected a module, got {type(module).__name__}")
    _data_parallel_devices("data_parallel", device_ids, output_device, dim)
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    if module_kwargs is not None and not isinstance(module_kwargs, dict):
        raise ValueError(f"data_parallel: module_kwargs must be a dict, got {type(module_kwargs).__name__}")
    return module(*inputs, **(module_kwargs or {}))
