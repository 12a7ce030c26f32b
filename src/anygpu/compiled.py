"""`anygpu.compile`: run a training step once per input signature through Python, then
replay its recorded kernels (runtime/capture.py says how and when that is exact).

    step = ag.compile(train_step)        # or @ag.compile on the definition
    loss = step(x, y)                     # same results as train_step(x, y)

The first calls run eagerly while the device records them; when two consecutive
calls recorded the same commands over the same persistent buffers, later calls with
inputs of the same shapes and dtypes copy the inputs into the step's own buffers and
replay the recording in one submit. Returned Tensors are fresh copies each call; a step
may return None, a Tensor, or tuples, lists and dicts of them.

Inputs: the step's Tensor arguments (positional or keyword), and the Tensors it closes over
-- its closure variables and the globals its own code names, directly or in a tuple, list or
dict (`def step(): loss = F.cross_entropy(model(X), Y)` with a new X, Y each call). Input
Tensors are copied into buffers owned by the compiled step, so the caller's tensors are
never overwritten by a replay -- except a closed-over Tensor the step writes in place,
which gets the step's result copied back. Tensors that require grad (parameters) are
passed as they are and must be the same objects on every call. Tensors reached another
way (an attribute, a helper function's globals) are not inputs: if they change, the
step's commands change and it runs eagerly, saying so.

Left eager (correct, not faster), with the exact reason in `step.reason(...)` (None only
for a step that is replayed): a step that reads values back (`.item()`, `.numpy()`,
printing; the reason names the line), one whose kernel parameters or uploads change from
call to call outside `Device.dynamic` (a dropout seed drawn on the host, `ag.randn` inside
the step), or one whose commands vary. While the autotuner is still timing kernels for
the step's shapes (ops/tuner.py) the step runs eagerly and is not counted against
`attempts`. ANYGPU_COMPILE_DEBUG=1 prints, on stderr, each eager call's reason (the first
difference between two recordings) and when replay begins.

Parameters' `.grad` tensors keep their identity across replays (they are overwritten
in place, as CUDA-graph training does).

Not guarded (as with CUDA graphs): Python state the step reads without launching a kernel
(a module's train/eval mode, a flag, a scheduler stepped inside the step). After changing
such state, call `step.release()` so the next calls record afresh.
"""

from __future__ import annotations

import functools
import os
import sys

from .ops import gpu, tuner
from .runtime.capture import Recording, Replay, same_step, written
from .tensor import Tensor, is_grad_enabled

__all__ = ["compile", "CompiledStep"]

_MAX_CONTAINER = 64  # a closed-over tuple/list/dict longer than this is not searched for inputs


def compile(fn=None, *, max_signatures: int = 4, attempts: int = 4):
    """Wrap a step function for capture and replay (usable as a decorator, with or
    without arguments). max_signatures: input signatures captured at most (others run
    eagerly); attempts: eager calls per signature before giving up on replay."""
    if fn is None:
        return lambda f: CompiledStep(f, max_signatures=max_signatures, attempts=attempts)
    return CompiledStep(fn, max_signatures=max_signatures, attempts=attempts)


def _debug() -> bool:
    return os.environ.get("ANYGPU_COMPILE_DEBUG", "").strip().lower() not in ("", "0", "false", "off", "no")


def _flatten(value, leaves: list):
    """Structure of nested tuples/lists/dicts with every Tensor replaced by its index in leaves."""
    if isinstance(value, Tensor):
        leaves.append(value)
        return ("T", len(leaves) - 1)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_flatten(v, leaves) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _flatten(v, leaves)) for k, v in value.items()))
    return ("V", value)


def _build(structure, leaves: list):
    tag, body = structure
    if tag == "T":
        return leaves[body]
    if tag == "tuple":
        return tuple(_build(s, leaves) for s in body)
    if tag == "list":
        return [_build(s, leaves) for s in body]
    if tag == "dict":
        return {k: _build(s, leaves) for k, s in body}
    return body


def _words(buf) -> int:
    return -(-max(buf.nbytes, 1) // 4) * 4


def _closed_over(fn) -> tuple[tuple, list[Tensor]]:
    """(names, Tensors) that `fn` closes over: its closure cells and the globals its code
    names, each a Tensor or a tuple/list/dict holding Tensors (one level)."""
    func = getattr(fn, "__func__", fn)  # a bound method's function
    code = getattr(func, "__code__", None)
    if code is None:
        return (), []
    names: list = []
    found: list[Tensor] = []

    def collect(name, value):
        if isinstance(value, Tensor):
            names.append(name)
            found.append(value)
        elif isinstance(value, (tuple, list)) and len(value) <= _MAX_CONTAINER:
            for i, item in enumerate(value):
                if isinstance(item, Tensor):
                    names.append(f"{name}[{i}]")
                    found.append(item)
        elif isinstance(value, dict) and len(value) <= _MAX_CONTAINER:
            for k, item in value.items():
                if isinstance(item, Tensor):
                    names.append(f"{name}[{k!r}]")
                    found.append(item)

    for name, cell in zip(code.co_freevars, func.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not yet filled
            continue
        collect(name, value)
    scope = getattr(func, "__globals__", None) or {}
    for name in code.co_names:
        if name in scope:
            collect(name, scope[name])
    return tuple(names), found


def _sig(t: Tensor) -> tuple:
    return (tuple(t.shape), t.dtype, t.requires_grad, id(t) if t.requires_grad else None)


class _Signature:
    """Everything recorded for one input signature."""

    def __init__(self, dev, args_leaves: list[Tensor], closed: list[Tensor]):
        self.dev = dev
        self.state = "recording"  # then "replay" or "eager"
        self.reason: str | None = "not called yet"
        self.tries = 0
        self.calls = 0
        self.previous: tuple | None = None  # (Recording, output structure, input buffers) of the last eager call
        self.replay: Replay | None = None
        self.outputs = None  # (structure, [(gpu buffer, shape, dtype, len, nbytes) per Tensor])
        # Private copies of the inputs (parameters, which require grad, pass through as they are).
        self.private = [leaf if leaf.requires_grad else
                        Tensor(dev.empty(leaf._buf.len, leaf._buf.dtype), leaf.shape, leaf.dtype)
                        for leaf in args_leaves]
        # Closed-over inputs: the index in `closed` of each one with a buffer of its own (first
        # of those sharing one). At a replay, those that were another buffer in each of the two
        # recordings compared are copied into the step's own buffer (`copied`: slot -> Buffer),
        # and back when the step writes them; the others must still be the recorded buffer.
        self.slots = _slots(closed)
        self.copied: dict = {}  # (made before a recording: never one of its pool buffers)
        self.fixed: dict = {}  # slot -> (the Tensor, its wgpu buffer) in both recordings
        self.write_back: list[int] = []  # copied slots the step writes in place

    def release(self) -> None:
        if self.replay is not None:
            self.replay.release()
            self.replay = None


def _slots(closed: list[Tensor]) -> list[int]:
    """Indices of the closed-over Tensors that are inputs (not requiring grad), one per buffer."""
    seen: set = set()
    slots = []
    for i, t in enumerate(closed):
        if not t.requires_grad and id(t._buf) not in seen:
            seen.add(id(t._buf))
            slots.append(i)
    return slots


class CompiledStep:
    """A step function with capture and replay; see the module docstring."""

    def __init__(self, fn, max_signatures: int = 4, attempts: int = 4):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_signatures = max_signatures
        self.attempts = attempts
        self._signatures: dict = {}
        self._last_reason: str | None = "not called yet"
        self.stats = {"eager": 0, "replayed": 0}

    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", None) or repr(self.fn)

    def _key(self, args, kwargs):
        leaves: list[Tensor] = []
        structure = _flatten((args, kwargs), leaves)
        names, closed = _closed_over(self.fn)
        owners = {}
        aliases = tuple(owners.setdefault(id(t._buf), i) for i, t in enumerate(closed))
        sig = tuple(_sig(t) for t in leaves)
        key = (structure, sig, names, tuple(_sig(t) for t in closed), aliases, is_grad_enabled())
        try:
            hash(key)
        except TypeError as exc:
            return None, structure, leaves, closed, f"an argument is not hashable ({exc})"
        return key, structure, leaves, closed, None

    def reason(self, *args, **kwargs) -> str | None:
        """Why calls with these arguments' signature run eagerly; None only when they are
        replayed. Without arguments, for a step that takes some: the reason of the last call."""
        key, _, leaves, _, unhashable = self._key(args, kwargs)
        if unhashable is not None:
            return unhashable
        entry = self._signatures.get(key)
        if entry is not None:
            return None if entry.state == "replay" else entry.reason
        if not args and not kwargs:
            return self._last_reason
        if len(self._signatures) >= self.max_signatures:
            return f"more than max_signatures={self.max_signatures} input signatures: this one runs eagerly"
        return "not called yet with these arguments' shapes and dtypes"

    def release(self) -> None:
        """Forget every capture (unpins its buffers); later calls record afresh."""
        for entry in self._signatures.values():
            entry.release()
        self._signatures.clear()

    def _eager(self, why: str, args, kwargs):
        self.stats["eager"] += 1
        self._note(why)
        return self.fn(*args, **kwargs)

    def _note(self, why: str | None) -> None:
        if why is not None and _debug() and why != self._last_reason:
            print(f"anygpu.compile: {self._name()} runs eagerly: {why}", file=sys.stderr)
        self._last_reason = why

    def __call__(self, *args, **kwargs):
        key, structure, leaves, closed, unhashable = self._key(args, kwargs)
        tensors = leaves + closed
        dev = tensors[0]._buf._dev if tensors else gpu()
        if dev._recording is not None:
            # Called inside another step being captured: run eagerly so that step records it.
            return self._eager("called inside another step being captured (it is part of that one)", args, kwargs)
        if unhashable is not None:
            return self._eager(unhashable, args, kwargs)
        entry = self._signatures.get(key)
        if entry is None:
            if len(self._signatures) >= self.max_signatures:
                return self._eager(f"more than max_signatures={self.max_signatures} input signatures: "
                                   f"this one runs eagerly", args, kwargs)
            entry = self._signatures[key] = _Signature(dev, leaves, closed)
        entry.calls += 1
        if entry.state == "replay":
            moved = next((n for n, (t, b) in entry.fixed.items()
                          if closed[entry.slots[n]] is not t or t._buf._gpu is not b), None)
            if moved is None and not entry.replay.stale():
                self._last_reason = None
                return self._replay(entry, leaves, closed)
            entry.release()  # a persistent buffer was replaced: record again
            entry.state, entry.previous, entry.tries = "recording", None, 0
            entry.reason = ("a buffer the capture used was replaced (e.g. a parameter reassigned): recording again"
                            if moved is None else f"{_closed_over(self.fn)[0][entry.slots[moved]]} is another tensor "
                            f"than in the recordings (the same one twice before): recording again")
            self._note(entry.reason)
        if entry.state == "eager":
            return self._eager(entry.reason, args, kwargs)
        return self._record(entry, structure, leaves, closed)

    def _copy_in(self, entry: _Signature, leaves: list[Tensor], closed: list[Tensor]) -> list[tuple]:
        copies = []
        for leaf, private in zip(leaves, entry.private):
            if private is not leaf and private._buf._gpu is not leaf._buf._gpu:
                copies.append(("copy", leaf._buf._gpu, 0, private._buf._gpu, 0, _words(leaf._buf)))
        for slot, private in entry.copied.items():
            leaf = closed[entry.slots[slot]]
            copies.append(("copy", leaf._buf._gpu, 0, private._gpu, 0, _words(leaf._buf)))
        return copies

    def _record(self, entry: _Signature, structure, leaves: list[Tensor], closed: list[Tensor]):
        self.stats["eager"] += 1
        dev = entry.dev
        for leaf, private in zip(leaves, entry.private):
            if private is not leaf:
                dev.copy(leaf._buf, private._buf)
        inputs = [closed[i]._buf._gpu for i in entry.slots]  # (realizes deferred work before recording)
        for n, index in enumerate(entry.slots):  # the step's own buffers for them, made before recording
            if n not in entry.copied:
                entry.copied[n] = dev.empty(closed[index]._buf.len, closed[index]._buf.dtype)
        args, kwargs = _build(structure, entry.private)
        provisional = tuner.provisional_calls()
        recording = Recording(dev)
        recording.start()
        try:
            result = self.fn(*args, **kwargs)
        finally:
            recording.stop()
        out_leaves: list[Tensor] = []
        out_structure = _flatten(result, out_leaves)
        why = recording.why_not_replayable()
        if why is None:
            touched = set(map(id, recording.buffers()))
            if any(id(t._buf._gpu) not in touched for t in out_leaves):
                why = "the step returns a Tensor it did not compute"
        if why is not None:
            entry.state, entry.reason, entry.previous = "eager", why, None
            self._note(why)
            return result
        if tuner.provisional_calls() != provisional:
            # Kernels chosen for now only: a replay would keep them (and stop their tuning).
            entry.previous = None
            entry.reason = ("the autotuner is still timing kernels for this step's shapes (ops/tuner.py, "
                            "ANYGPU_TUNE_BUDGET; `anygpu tune -- CMD` tunes ahead): replay begins once they are tuned")
            self._note(entry.reason)
            return result
        entry.tries += 1
        previous, entry.previous = entry.previous, (recording, out_structure, inputs,
                                                    [closed[index] for index in entry.slots])
        if previous is None:
            entry.reason = "recorded once: replayed from the next call if that one records the same commands"
            self._note(entry.reason)
            return result
        why = same_step(previous[0], recording, (previous[2], inputs))
        if why is None and previous[1] != out_structure:
            why = "the returned values differ in structure"
        if why is None:
            # The same Tensor over the same buffer in both (a new batch may get the buffer its
            # predecessor gave back to the pool: that one is copied like any other).
            entry.fixed = {n: (closed[index], inputs[n]) for n, index in enumerate(entry.slots)
                           if previous[2][n] is inputs[n] and previous[3][n] is closed[index]}
            for n in entry.fixed:  # read where they are: no copy of their own
                del entry.copied[n]
            rebind = {inputs[n]: private._gpu for n, private in entry.copied.items()}
            changed = written(recording)
            entry.write_back = [n for n in entry.copied if id(inputs[n]) in changed]
            entry.replay = Replay(recording, rebind)
            entry.outputs = (out_structure, [(rebind.get(t._buf._gpu, t._buf._gpu), t.shape, t.dtype, t._buf.dtype,
                                              t._buf.len) for t in out_leaves])
            entry.state, entry.reason, entry.previous = "replay", None, None
            if _debug():
                print(f"anygpu.compile: {self._name()}: replayed from the next call on "
                      f"({recording.n_dispatches} dispatches)", file=sys.stderr)
            self._last_reason = None
            # This call's outputs live in pinned buffers that the next replay overwrites.
            return _build(out_structure, [t.detach().clone() for t in out_leaves])
        why = f"two calls recorded different commands: {why}"
        if entry.tries >= self.attempts:
            entry.state, entry.previous = "eager", None
            why += f" (gave up after {entry.tries} recordings; step.release() records afresh)"
        entry.reason = why
        self._note(why)
        return result

    def _replay(self, entry: _Signature, leaves: list[Tensor], closed: list[Tensor]):
        self.stats["replayed"] += 1
        replay = entry.replay
        dev = replay.dev
        structure, outs = entry.outputs
        results, after = [], []
        for gpu_buffer, shape, dtype, buf_dtype, length in outs:
            fresh = dev.empty(length, buf_dtype)
            after.append(("copy", gpu_buffer, 0, fresh._gpu, 0, _words(fresh)))
            results.append(Tensor(fresh, shape, dtype))
        for n in entry.write_back:  # closed-over tensors the step writes in place get its result
            leaf = closed[entry.slots[n]]
            after.append(("copy", entry.copied[n]._gpu, 0, leaf._buf._gpu, 0, _words(leaf._buf)))
        replay.run(before=self._copy_in(entry, leaves, closed), after=after)
        return _build(structure, results)
