"""Capture and replay of a recorded step (the runtime half of `anygpu.compile`).

A `Recording` watches one eager execution: every command the device submits
(dispatches with their kernel, buffers, parameter bytes and grid; copies; clears),
host uploads (as in-stream writes), which buffers the pool handed out during it, and
whether the host read anything back. Two consecutive recordings of the same step are
compared (`same_step`): when they agree, the later one becomes a `Replay` and later
calls run it as one command buffer, one compute pass per run of dispatches, one submit,
encoded by direct C calls.

What makes replay correct:
- Every wgpu buffer the replay touches is pinned: the pool never hands it out to other
  work, even after the Buffer that held it dies (device.py `_retire` keeps it aside).
- Buffers that existed before the step ("externals": parameters, optimizer state,
  the compiled function's private inputs) must be the very same objects in both
  recordings; parameter bytes and uploaded data must be equal byte for byte. Anything
  the host computes afresh each step (a dropout seed, a step counter, a changed
  learning rate) therefore makes the recordings differ and the step stays eager ...
- ... unless it was launched inside `Device.dynamic(fn)`: such dispatches are compared
  by kernel, buffers and grid only, and each replay calls `fn` again with the device in
  patch mode: its launches only refresh their parameter bytes (optimizers use this, so
  their Python-side step counters and a scheduler's learning rate stay live).
- A step that reads a value back to the host is never replayed (its control flow may
  depend on the value); neither is one that writes timestamps.
- Host calls (`Device.host_call`) and gates (`Device.gate`) are recorded in place: a
  replay submits the commands before each, then calls it (DistributedDataParallel starts
  a bucket's MPI exchange at a call and waits for its result at a gate). Both recordings
  must hold the same functions at the same places.
"""

from __future__ import annotations

import functools
import os
import struct
import threading
import traceback
from collections.abc import Callable

from . import native
from .errors import GpuError
from .params import pack as pack_params
from .webgpu import wgpu  # the runtime's module (wgpu-native or Dawn): its GPUError is the one raised


class CaptureError(RuntimeError):
    """A replayed step's dynamic part did not launch what was recorded."""


class Recording:
    """The commands of one eager execution, in queue order."""

    def __init__(self, dev):
        self.dev = dev
        self.commands: list[tuple] = []
        self.created: set = set()  # wgpu buffers the pool handed out while recording
        self._reads = 0
        self.read_at: str | None = None  # where the step first read a value back (for the reason)
        self.unsupported: str | None = None
        self.hooks: list[tuple] = []  # (fn, first dispatch ordinal, end ordinal)
        self.n_dispatches = 0
        self._first_dispatch = None  # device dispatch count when recording began

    def start(self) -> None:
        dev = self.dev
        if dev._recording is not None:
            raise CaptureError("a step is already being captured on this device")
        dev.flush()
        self._first_dispatch = dev.stats["dispatches"]
        dev._recording = self

    def stop(self) -> None:
        dev = self.dev
        try:
            dev.flush()
        finally:
            dev._recording = None

    @property
    def reads(self) -> int:
        """How many times the host read values back while recording."""
        return self._reads

    @reads.setter
    def reads(self, value: int) -> None:  # Device.read counts here: note where the first read came from
        if self.read_at is None and value > self._reads:
            self.read_at = _where()
        self._reads = value

    # called by Device while recording
    def add_batch(self, pending, params, slot: int) -> None:
        owned = self.dev._owned
        for cmd in pending:
            kind = cmd[0]
            if kind == "dispatch":
                kernel, key = cmd[5], cmd[6]
                offset = cmd[3] * slot
                data = bytes(params[offset:offset + kernel.param_struct.size])
                self.commands.append(("dispatch", kernel, key[1:], data, cmd[4]))
                self.n_dispatches += 1
            elif kind == "copy":
                # Copies into read-back staging belong to reads (counted there); copies into a
                # HostStage's buffers are part of the step.
                if cmd[3] in owned or cmd[3] in self.dev.stage_buffers:
                    self.commands.append(cmd)
            elif kind == "clear":
                self.commands.append(cmd)
            else:
                self.unsupported = f"{kind} commands"

    def host(self, kind: str, *fns) -> None:
        """A host call ("call", fn) or gate ("gate", ready, wait, notify) at this point of the step."""
        self.commands.append((kind, *fns))

    def write(self, gpu_buffer, data: bytes) -> None:
        # A host write reaches the queue before the batch being recorded: it goes first.
        self.commands.append(("write", gpu_buffer, data))

    def dynamic(self, fn, first: int, end: int) -> None:
        self.hooks.append((fn, first - self._first_dispatch, end - self._first_dispatch))

    # analysis
    def buffers(self) -> list:
        seen = {}
        for cmd in self.commands:
            for b in _buffers_of(cmd):
                seen[id(b)] = b
        return list(seen.values())

    def why_not_replayable(self) -> str | None:
        if self.reads:
            return "the step reads values back to the host" + (f" ({self.read_at})" if self.read_at else "")
        if self.unsupported:
            return f"the step records {self.unsupported}"
        if not self.n_dispatches:
            return "the step launches no kernels"
        return None


class paused:
    """`with paused(dev):` work inside is not part of the step being captured (e.g. an
    autotuner timing candidates on the first call of a step: its reads would otherwise
    mark the step as reading values back). The recording keeps what came before."""

    def __init__(self, dev):
        self.dev = dev
        self.recording = None

    def __enter__(self):
        dev = self.dev
        self.recording = getattr(dev, "_recording", None)
        if self.recording is not None:
            dev.flush()  # the step's commands so far go to the recording
            dev._recording = None
        return self

    def __exit__(self, *exc):
        if self.recording is not None:
            self.dev.flush()  # the paused work stays out of it
            self.dev._recording = self.recording
        return False


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _where() -> str | None:
    """The calling code's place, for a reason: 'at FILE:LINE in FUNCTION: SOURCE' of the
    innermost frame outside anygpu's runtime (an op's `.item()`, GradScaler's inf check),
    and the user's own line that led there when that is another."""
    inside = (os.path.join(_PACKAGE, "runtime"), os.path.join(_PACKAGE, "tensor"), os.path.join(_PACKAGE, "ops", "host64"))
    frames = [f for f in traceback.extract_stack()[:-2] if not f.filename.startswith(inside)]
    if not frames:
        return None
    inner = frames[-1]
    user = next((f for f in reversed(frames) if not f.filename.startswith(_PACKAGE)), None)
    text = f"at {os.path.basename(inner.filename)}:{inner.lineno} in {inner.name}: {(inner.line or '').strip()}"
    if user is not None and user is not inner:
        text += f", from {os.path.basename(user.filename)}:{user.lineno}: {(user.line or '').strip()}"
    return text


def _buffers_of(cmd) -> tuple:
    kind = cmd[0]
    if kind == "dispatch":
        return cmd[2]
    if kind == "copy":
        return (cmd[1], cmd[3])
    if kind in ("call", "gate"):
        return ()
    return (cmd[1],)


def _describe(cmd, ordinal: int | None = None) -> str:
    kind = cmd[0]
    if kind == "dispatch":
        return f"dispatch {ordinal} ({cmd[1].name}, grid {cmd[4]})"
    if kind == "copy":
        return f"a copy of {cmd[5]} bytes"
    if kind == "clear":
        return f"a clear of {cmd[2]} bytes"
    if kind == "write":
        return f"an upload of {len(cmd[2])} bytes"
    return f"a host {kind} ({getattr(cmd[1], '__qualname__', cmd[1])})"


def _first_word(x: bytes, y: bytes) -> str:
    """The first 4-byte word where parameter blocks x and y differ, as u32 and f32."""
    for at in range(0, min(len(x), len(y)) - 3, 4):
        if x[at:at + 4] != y[at:at + 4]:
            (ux,), (uy,) = struct.unpack("<I", x[at:at + 4]), struct.unpack("<I", y[at:at + 4])
            (fx,), (fy,) = struct.unpack("<f", x[at:at + 4]), struct.unpack("<f", y[at:at + 4])
            return f"parameter word {at // 4}: {ux} (as f32 {fx:.7g}), then {uy} (as f32 {fy:.7g})"
    return f"parameter blocks of {len(x)} and {len(y)} bytes"


def same_step(a: Recording, b: Recording, inputs: tuple = ((), ())) -> str | None:
    """None when recordings a and b ran the same step; else the first difference.

    inputs: (a's, b's) lists of wgpu buffers that are the step's inputs by position (tensors
    a compiled step closes over): input i may be another buffer in each recording."""
    slots_a = {id(x): i for i, x in enumerate(inputs[0])}
    slots_b = {id(x): i for i, x in enumerate(inputs[1])}
    dynamic = set()
    for _, first, end in b.hooks:
        dynamic.update(range(first, end))
    ordinal = 0
    for i, (ca, cb) in enumerate(zip(a.commands, b.commands)):
        where = f"command {i}, {_describe(cb, ordinal)}"
        if ca[0] != cb[0]:
            return f"command {i} is {_describe(ca, ordinal)}, then {_describe(cb, ordinal)}"
        kind = ca[0]
        if kind == "dispatch":
            if ca[1] is not cb[1] or ca[4] != cb[4]:
                return (f"command {i}: dispatch {ordinal} runs {ca[1].name} {ca[4]}, then {cb[1].name} {cb[4]} "
                        f"(another kernel or grid: a changed shape, or the autotuner changed its choice)")
            if ordinal not in dynamic and ca[3] != cb[3]:
                return (f"{where} gets other parameters (a host value changed: {_first_word(ca[3], cb[3])}; "
                        f"launch such work inside Device.dynamic)")
            ordinal += 1
        elif kind == "copy":
            if ca[2] != cb[2] or ca[4] != cb[4] or ca[5] != cb[5]:
                return f"{where}: a copy of another range"
        elif kind == "clear":
            if ca[2] != cb[2]:
                return f"{where}: a clear of another size"
        elif kind in ("call", "gate"):
            if ca[1:] != cb[1:]:
                return f"{where}: a host {kind} of another function"
        elif ca[2] != cb[2]:
            return (f"{where}: an upload of other data (a tensor made from host values inside the step, "
                    f"e.g. ag.tensor(...) of a new batch: pass it as an argument)")
        for slot, (xa, xb) in enumerate(zip(_buffers_of(ca), _buffers_of(cb))):
            external_a, external_b = xa not in a.created, xb not in b.created
            if external_a != external_b:
                return f"{where}, buffer {slot}: made inside the step in one call, not in the other"
            if external_b and xa is not xb and not (id(xa) in slots_a and slots_a[id(xa)] == slots_b.get(id(xb))):
                return (f"{where}, buffer {slot}: another buffer that existed before the step (a tensor the "
                        f"step reads was replaced between calls and is not an argument or a variable the step "
                        f"names: pass it as an argument)")
    if len(a.commands) != len(b.commands):
        return (f"{len(a.commands)} commands, then {len(b.commands)} (the step's work changed; the first "
                f"{min(len(a.commands), len(b.commands))} agree)")
    if [(h[1], h[2]) for h in a.hooks] != [(h[1], h[2]) for h in b.hooks]:
        return "the dynamic parts differ (an optimizer's or scheduler's launches)"
    return None


def _hoisted(commands: list, touched: list, host_filled) -> list[int]:
    """The order of `commands` with the work after the last of the trailing gates moved up, each command
    to just after the latest gate-held part that shares a buffer with it (touched[i]: the
    buffers command i reads or writes). A command that touches a buffer the host fills
    while a gate waits (`host_filled`: the HostStages' mapped buffers, the only way a gate's
    host work reaches the GPU) stays behind the last gate, and so does all that depends on it.

    In a data-parallel step the trailing gates hold, per bucket, the upload of its sum and the
    cut into the parameters' ``.grad``, and the optimizer step follows the last one. An
    update reads one parameter's gradient only, so it can run as soon as that bucket's sum is
    in, while the last bucket still travels through the host: what follows the last gate (the
    GPU's critical path into the next forward) shrinks to the last bucket's own updates. Any
    shared buffer counts as a dependency (read or write alike, pool reuse included), so the
    order of every pair of commands that touch one buffer is kept."""
    points = [i for i, cmd in enumerate(commands) if cmd[0] in ("call", "gate")]
    gates: list[int] = []
    while points and commands[points[-1]][0] == "gate":
        gates.insert(0, points.pop())
    if len(gates) < 2:
        return list(range(len(commands)))
    parts = [list(range(g + 1, end)) for g, end in zip(gates, gates[1:])] + [[]]  # the last one refilled below
    uses = [{id(b) for i in part for b in touched[i]} for part in parts]
    last = range(gates[-1] + 1, len(commands))
    pinned = {id(b) for b in host_filled}
    for i in last:
        mine = {id(b) for b in touched[i]}
        home = len(parts) - 1 if mine & pinned else next(
            (m for m in range(len(parts) - 1, -1, -1) if mine & uses[m]), 0)
        parts[home].append(i)
        uses[home] |= mine
    order = list(range(gates[0]))
    for g, part in zip(gates, parts):
        order.append(g)
        order += part
    return order


def _rebound(cmd, mapping: dict) -> tuple:
    """cmd with its buffers replaced as `mapping` says."""
    kind = cmd[0]
    get = mapping.get
    if kind == "dispatch":
        return (*cmd[:2], tuple(get(b, b) for b in cmd[2]), *cmd[3:])
    if kind == "copy":
        return (kind, get(cmd[1], cmd[1]), cmd[2], get(cmd[3], cmd[3]), *cmd[4:])
    if kind in ("call", "gate"):
        return cmd
    return (kind, get(cmd[1], cmd[1]), *cmd[2:])


def written(rec: Recording) -> set:
    """ids of the wgpu buffers the recorded commands write (dispatch outputs, copy and
    upload destinations, clears)."""
    out = set()
    for cmd in rec.commands:
        kind = cmd[0]
        if kind == "dispatch":
            out.update(id(b) for b in cmd[2][cmd[1].n_in:])
        elif kind == "copy":
            out.add(id(cmd[3]))
        elif kind in ("clear", "write"):
            out.add(id(cmd[1]))
    return out


class Replay:
    """A recording turned into a re-runnable command list over pinned buffers."""

    def __init__(self, rec: Recording, rebind: dict | None = None):
        """rebind: {wgpu buffer: wgpu buffer} used in place of the recorded ones (a compiled
        step's own copies of the tensors it closes over)."""
        dev = self.dev = rec.dev
        if rebind:
            rec_commands = [_rebound(cmd, rebind) for cmd in rec.commands]
        else:
            rec_commands = rec.commands
        seen: dict = {}
        for cmd in rec_commands:
            for b in _buffers_of(cmd):
                seen[id(b)] = b
        self._buffers = list(seen.values())
        self.externals = [b for b in self._buffers if b not in rec.created]
        self._pin()
        slot = dev._slot
        n = max(rec.n_dispatches, 1)
        self._params = bytearray(slot * n)
        self._param_buffer = dev._device.create_buffer(
            size=len(self._params), usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        if dev._raw_calls:
            self._offset_table, self._offset_ptrs = native.offset_table(slot, n)
        else:
            self._offset_ptrs = None
        self._constants = []  # buffers holding uploaded data, copied in at their place
        groups: dict = {}
        commands = []
        self._dispatch_info = []  # per dispatch ordinal: (kernel, buffers, grid)
        for cmd in rec_commands:
            kind = cmd[0]
            if kind == "dispatch":
                _, kernel, buffers, data, grid = cmd
                ordinal = len(self._dispatch_info)
                self._params[ordinal * slot:ordinal * slot + len(data)] = data
                group_key = (kernel.layout, *buffers)
                group = groups.get(group_key)
                if group is None:
                    group = groups[group_key] = self._bind_group(kernel, buffers)
                commands.append(("dispatch", kernel.pipeline, group, ordinal, grid))
                self._dispatch_info.append((kernel, buffers, grid))
            elif kind == "write":
                _, dst, data = cmd
                const = dev._device.create_buffer(
                    size=max(len(data), 4), usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
                dev._queue.write_buffer(const, 0, data)
                self._constants.append(const)
                commands.append(("copy", const, 0, dst, 0, len(data)))
            else:
                commands.append(cmd)
        self._groups = groups
        touched = [_buffers_of(cmd) for cmd in rec_commands]
        order = _hoisted(commands, touched, dev.stage_buffers)
        self.commands = [commands[i] for i in order]
        self._touched = [touched[i] for i in order]  # the buffers each command uses
        self._host_points = [i for i, cmd in enumerate(self.commands) if cmd[0] in ("call", "gate")]
        self.host_points: list[int] = []
        self.hooks = rec.hooks
        self.n_dispatches = rec.n_dispatches
        dev._queue.write_buffer(self._param_buffer, 0, self._params)
        self._released = False

    def _bind_group(self, kernel, buffers):
        entries = [{"binding": 0, "resource": {"buffer": self._param_buffer, "offset": 0,
                                               "size": min(self.dev._slot, 256)}}]
        for i, b in enumerate(buffers):
            entries.append({"binding": i + 1, "resource": {"buffer": b, "offset": 0, "size": b.size}})
        return self.dev._device.create_bind_group(layout=kernel.layout, entries=entries)

    def _pin(self) -> None:
        dev = self.dev
        pinned = dev._pinned
        for b in self._buffers:
            pinned[b] = pinned.get(b, 0) + 1
        # Buffers freed during the step sit in the pool's lists: take them out.
        ours = set(map(id, self._buffers))
        for lists in (dev._free, dev._retired):
            for size, bucket in lists.items():
                kept = [b for b in bucket if id(b) not in ours]
                if len(kept) != len(bucket):
                    for b in bucket:
                        if id(b) in ours:
                            dev._orphans[b] = size
                            idle = getattr(dev, "_idle_since", None)
                            if idle is not None:
                                idle.pop(b, None)
                    bucket[:] = kept

    def release(self) -> None:
        """Unpin: buffers no live Buffer holds go back to the pool."""
        if self._released:
            return
        self._released = True
        dev = self.dev
        for b in self._buffers:
            count = dev._pinned.get(b, 0) - 1
            if count > 0:
                dev._pinned[b] = count
                continue
            dev._pinned.pop(b, None)
            size = dev._orphans.pop(b, None)
            if size is not None:
                dev._retired.setdefault(size, []).append(b)
        self._groups = {}
        self.commands = []
        self._touched = []

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass

    def stale(self) -> bool:
        """True when an external buffer's owner died (e.g. a parameter was replaced)."""
        orphans = self.dev._orphans
        return bool(orphans) and any(b in orphans for b in self.externals)

    def write_parameters(self) -> None:
        """Queue the host copy of the dispatches' parameters into the GPU's (work submitted
        before this call still reads the old bytes: queue order)."""
        self.dev._queue.write_buffer(self._param_buffer, 0, self._params)

    def patch_dynamic(self) -> bool:
        """Call every dynamic hook with the device in patch mode: their launches only set
        their parameters in the host copy (`write_parameters` takes it to the GPU). Host
        work only, so a replay does it before waiting for the previous step's tail. True
        when there were hooks."""
        if not self.hooks:
            return False
        dev = self.dev
        patcher = _Patcher(self)
        dev.launch = patcher.launch
        for name in ("empty", "alloc", "upload", "copy", "write", "read"):
            setattr(dev, name, patcher.refuse(name))
        fuse, dev.fuse = dev.fuse, False  # as while recording (Device.dynamic): op by op
        try:
            for index, (fn, first, end) in enumerate(self.hooks):
                patcher.begin(first, end)
                fn()
                patcher.finish()
        finally:
            dev.fuse = fuse
            for name in ("launch", "empty", "alloc", "upload", "copy", "write", "read"):
                try:
                    delattr(dev, name)
                except AttributeError:
                    pass
        return True

    def _encoded(self, commands):
        """`commands` encoded into one finished command buffer (submitted later, in order)."""
        dev = self.dev
        encoder = dev._device.create_command_encoder()
        if self._offset_ptrs is not None:
            with native.Captured(dev.adapter_name):
                dev._encode(encoder, commands, self._offset_ptrs)
        else:
            dev._encode(encoder, commands, None)
        return encoder.finish()

    def run(self, before=(), after=()) -> None:
        """Submit before + the recorded commands + after (`before`/`after`: extra copy
        commands, inputs in and outputs out), stopping at each host call / gate to run it.

        The gates after the last host call (a data-parallel step: one per bucket, each
        holding its bucket's upload, the last one the optimizer step too) do not stop the
        caller: what each holds is encoded now and the chain of them is left to the device
        (Device.defer, `_Chain`). Each part is submitted, in order, as soon as its gate may
        open -- by the thread that opened it, when the gate has a notifier (the MPI worker,
        as each exchange ends) -- and the device's next flush waits for the rest. So the
        caller prepares and encodes the next step while this one's backward runs and its
        exchanges travel, and the GPU gets each upload as soon as its sum has arrived. A
        gate followed by a host call still waits here (the call needs what it holds)."""
        dev = self.dev
        commands = self.commands
        if before or after:
            commands = [*before, *commands, *after]
        shift = len(before)
        self.host_points = [index + shift for index in self._host_points]
        ends = [*self.host_points, len(commands)]
        trailing = len(self.host_points)  # where the run of gates that ends the step begins
        while trailing and commands[self.host_points[trailing - 1]][0] == "gate":
            trailing -= 1
        try:
            first = self._encoded(commands[:ends[0]]) if ends[0] else None
            # The dynamic hooks (an optimizer's per-parameter updates: ~1-3 ms of Python for
            # an AdamW over 70 tensors) run before the flush: after it, in a data-parallel
            # step, the GPU would sit idle through them, its last work (the previous step's
            # chain, waited for in the flush) being short.
            patched = self.patch_dynamic()
            previous = dev._deferred
            if isinstance(previous, _Chain) and first is not None and dev.submit_ahead(previous.touched):
                # The previous step's tail is still out (its last bucket travelling) and
                # nothing recorded since must follow it but this step: whichever thread submits
                # the tail's last part submits this step's start right behind it, so the GPU
                # goes on without waiting for this thread to wake up.
                previous.then(functools.partial(self._begin, first, patched))
                first, patched = None, False
            dev.flush()  # earlier work first, in queue order (and the previous step's deferred chain)
            if patched:
                self.write_parameters()  # after everything that used the old parameters
            submit = dev._queue.submit
            if first is not None:
                submit([first])
            start, ahead = ends[0], None  # ahead: the next segment, encoded while a gate waited
            for point, index in enumerate(self.host_points[:trailing]):  # up to each call / gate, then run it
                if index > start:
                    submit([ahead if ahead is not None else self._encoded(commands[start:index])])
                ahead = None
                cmd = commands[index]
                start = index + 1
                if cmd[0] == "call":
                    cmd[1]()
                    continue
                if ends[point + 1] > start and not cmd[1]():  # encode what the gate holds while it waits
                    ahead = self._encoded(commands[start:ends[point + 1]])
                cmd[2]()
            if trailing < len(self.host_points):
                index = self.host_points[trailing]
                if index > start:
                    submit([ahead if ahead is not None else self._encoded(commands[start:index])])
                links = []
                for point in range(trailing, len(self.host_points)):
                    begin = self.host_points[point] + 1
                    links.append((commands[begin - 1], self._encoded(commands[begin:ends[point + 1]])
                                  if ends[point + 1] > begin else None))
                chain = _Chain(dev, [(cmd[2], buffer) for cmd, buffer in links])
                held = self._touched[self._host_points[trailing]:]
                chain.touched = {id(b) for buffers in held for b in buffers}
                chain.touched.update(id(b) for cmd in after for b in _buffers_of(cmd))
                dev.defer(chain)
                for link, (cmd, buffer) in enumerate(links):
                    if cmd[3] is not None:  # the gate's own thread submits its part when it opens
                        cmd[3](functools.partial(chain.open, link))
            elif start < len(commands):
                submit([ahead if ahead is not None else self._encoded(commands[start:])])
        except wgpu.GPUError as exc:
            raise GpuError(f"GPU error on {dev.adapter_name}: {exc}") from exc
        finally:
            dev.stats["submits"] += 1
        dev.stats["dispatches"] += self.n_dispatches
        dev.stats["replays"] = dev.stats.get("replays", 0) + 1

    def _begin(self, first, patched: bool) -> None:
        """Start a replay: its parameters (when the dynamic hooks changed them), then its
        first segment (run by _Chain.then on the thread that submits a previous tail)."""
        if patched:
            self.write_parameters()
        self.dev._queue.submit([first])


class _Chain:
    """A replay's trailing gates and the command buffer each holds (Device.defer).

    `open(i)` (any thread: a gate's notifier, Device.gate) marks gate i open and submits,
    in order, every held buffer whose gate and all gates before it are open; called by the
    device's next flush, the chain waits at each gate in turn (its errors and bookkeeping)
    and submits what is left. A lock keeps the submits in gate order whatever the threads.
    A gate that fails never opens: what it and the gates after it hold is dropped, and its
    error comes out of that flush (with what an early submit raised, if one failed).

    Why early: in a data-parallel step the gates open on the MPI worker thread as each
    bucket's exchange ends, while the caller is busy with the next step's host work; the
    GPU would otherwise idle between the end of backward and the caller's next flush."""

    __slots__ = ("dev", "links", "lock", "opened", "next", "error", "touched", "after")

    def __init__(self, dev, links):
        self.dev = dev
        self.links = links  # (wait, command buffer or None) per gate, in order
        self.lock = threading.Lock()
        self.opened = [False] * len(links)
        self.next = 0  # the first link not submitted yet
        self.error: BaseException | None = None
        self.touched: set = set()  # ids of the wgpu buffers its parts use (Device._submit_ahead)
        self.after: Callable[[], None] | None = None  # run once the last part is submitted (then)

    @property
    def submitted(self) -> int:
        """How many of the gates' parts went to the queue."""
        return self.next

    def then(self, fn: Callable[[], None]) -> None:
        """fn() right after the last part is submitted, on the thread that submits it (now,
        here, if it is out already). It does not run when a gate fails or a submit failed
        (the next flush raises that); what it raises comes out of the next flush too."""
        with self.lock:
            if self.error is not None:
                return
            if self.next < len(self.links):
                self.after = fn
                return
        fn()

    def open(self, link: int) -> None:
        with self.lock:
            self.opened[link] = True
            while self.error is None and self.next < len(self.links) and self.opened[self.next]:
                buffer = self.links[self.next][1]
                self.next += 1
                if buffer is not None:
                    try:
                        self.dev._queue.submit([buffer])
                    except wgpu.GPUError as exc:
                        self.error = GpuError(f"GPU error on {self.dev.adapter_name}: {exc}")
                        self.error.__cause__ = exc
            if self.after is not None and self.error is None and self.next == len(self.links):
                after, self.after = self.after, None
                try:
                    after()
                except wgpu.GPUError as exc:
                    self.error = GpuError(f"GPU error on {self.dev.adapter_name}: {exc}")
                    self.error.__cause__ = exc

    def __call__(self) -> None:
        for link, (wait, _) in enumerate(self.links):
            wait()
            self.open(link)
        with self.lock:
            error, self.error = self.error, None
        if error is not None:
            raise error


class _Patcher:
    """Stands in for Device.launch while a replay's dynamic hooks run."""

    def __init__(self, replay: Replay):
        self.replay = replay
        self.next = self.end = 0

    def begin(self, first: int, end: int) -> None:
        self.next, self.end = first, end

    def finish(self) -> None:
        if self.next != self.end:
            raise CaptureError(f"a dynamic part of the captured step launched {self.next} kernels "
                               f"of the {self.end} recorded")

    def launch(self, kernel, inputs, outputs, params=(), grid=(1, 1, 1)) -> None:
        ordinal = self.next
        if ordinal >= self.end:
            raise CaptureError(f"{kernel.name}: a dynamic part of the captured step launched more "
                               f"kernels than were recorded")
        recorded_kernel, buffers, recorded_grid = self.replay._dispatch_info[ordinal]
        now = tuple(b._gpu for b in (*inputs, *outputs))
        if (recorded_kernel is not kernel or tuple(int(g) for g in grid) != recorded_grid
                or len(now) != len(buffers) or any(x is not y for x, y in zip(now, buffers))):
            raise CaptureError(f"{kernel.name}: a dynamic part of the captured step launched another "
                               f"kernel, grid or buffers than recorded ({recorded_kernel.name})")
        slot = self.replay.dev._slot
        pack_params(kernel.param_struct, self.replay._params, ordinal * slot, params)
        self.next = ordinal + 1

    @staticmethod
    def refuse(name: str):
        def refused(*args, **kwargs):
            raise CaptureError(f"{name}: a dynamic part of a captured step may only launch kernels")
        return refused
