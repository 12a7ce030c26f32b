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
and reads -- its closure variables and the globals its own code names, directly or in a
tuple, list or dict (`def step(): loss = F.cross_entropy(model(X), Y)` with a new X, Y each
call). Arguments are copied into buffers owned by the compiled step, so the caller's
tensors are never overwritten by a replay. A closed-over Tensor that was the same object in
the two recordings is read (and written) where it is, and a replay records afresh once that
name holds another tensor; one that was another tensor each time is copied into the step's
own buffer, and back when the step writes it in place. Tensors that require grad
(parameters) are passed as they are and must be the same objects on every call. Tensors
reached another way (an attribute, a helper function's globals) are not inputs: if they
change, the step's commands change and it runs eagerly, saying so.

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


def _closed_over(fn) -> dict:
    """{name: Tensor} that `fn` closes over: its closure cells and the globals its code
    names, each a Tensor or a tuple/list/dict holding Tensors (one level: 'batch[0]')."""
    func = getattr(fn, "__func__", fn)  # a bound method's function
    code = getattr(func, "__code__", None)
    if code is None:
        return {}
    found: dict = {}

    def collect(name, value):
        if isinstance(value, Tensor):
            found[name] = value
        elif isinstance(value, (tuple, list)) and len(value) <= _MAX_CONTAINER:
            for i, item in enumerate(value):
                if isinstance(item, Tensor):
                    found[f"{name}[{i}]"] = item
        elif isinstance(value, dict) and len(value) <= _MAX_CONTAINER:
            for k, item in value.items():
                if isinstance(item, Tensor):
                    found[f"{name}[{k!r}]"] = item

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
    return found


def _sig(t: Tensor) -> tuple:
    return (tuple(t.shape), t.dtype, t.requires_grad, id(t) if t.requires_grad else None)


class _Signature:
    """Everything recorded for one input signature."""

    def __init__(self, dev, args_leaves: list[Tensor]):
        self.dev = dev
        self.state = "recording"  # then "replay" or "eager"
        self.reason: str | None = "not called yet"
        self.tries = 0
        # (Recording, output structure, {name: (Tensor, wgpu buffer)} of the closed-over
        # Tensors it read) of the last eager call
        self.previous: tuple | None = None
        self.replay: Replay | None = None
        self.outputs = None  # (structure, [(gpu buffer, shape, dtype, len, nbytes) per Tensor])
        # Private copies of the inputs (parameters, which require grad, pass through as they are).
        self.private = [leaf if leaf.requires_grad else
                        Tensor(dev.empty(leaf._buf.len, leaf._buf.dtype), leaf.shape, leaf.dtype)
                        for leaf in args_leaves]
        # Closed-over inputs, by name: those the recordings read (`used`: name -> shape, dtype).
        # At a replay the ones that were the same Tensor over the same buffer in both recordings
        # (`fixed`) are read where they are; the others are copied into the step's own buffers
        # (`copied`: name -> Buffer, made before a recording, so never one of its pool buffers),
        # and back after it where the step writes them (`write_back`).
        self.used: dict = {}
        self.fixed: dict = {}
        self.copied: dict = {}
        self.write_back: list = []

    def reset(self, why: str) -> None:
        """Record afresh (a new situation, not a failed attempt)."""
        self.release()
        self.state, self.previous, self.tries, self.reason = "recording", None, 0, why

    def release(self) -> None:
        if self.replay is not None:
            self.replay.release()
            self.replay = None


def _read(closed: dict, buffers: dict, recording) -> dict:
    """{name: (Tensor, wgpu buffer)} of the closed-over Tensors (not requiring grad) whose
    buffer (as it was before the recording, `buffers`) the recording used, one name per buffer."""
    touched = set(map(id, recording.buffers()))
    used: dict = {}
    seen: set = set()
    for name, gpu_buffer in buffers.items():
        if id(gpu_buffer) in touched and id(gpu_buffer) not in seen:
            seen.add(id(gpu_buffer))
            used[name] = (closed[name], gpu_buffer)
    return used


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
        key = (structure, tuple(_sig(t) for t in leaves), is_grad_enabled())
        try:
            hash(key)
        except TypeError as exc:
            return None, structure, leaves, f"an argument is not hashable ({exc})"
        return key, structure, leaves, None

    def reason(self, *args, **kwargs) -> str | None:
        """Why calls with these arguments' signature run eagerly; None only when they are
        replayed. Without arguments, for a step that takes some: the reason of the last call."""
        key, _, leaves, unhashable = self._key(args, kwargs)
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
        key, structure, leaves, unhashable = self._key(args, kwargs)
        closed = _closed_over(self.fn)
        tensors = leaves or list(closed.values())
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
            entry = self._signatures[key] = _Signature(dev, leaves)
        if entry.state == "replay":
            why = self._changed(entry, closed)
            if why is None:
                self._last_reason = None
                return self._replay(entry, leaves, closed)
            entry.reset(why)
            self._note(why)
        if entry.state == "eager":
            return self._eager(entry.reason, args, kwargs)
        return self._record(entry, structure, leaves, closed)

    @staticmethod
    def _changed(entry: _Signature, closed: dict) -> str | None:
        """Why the replay cannot serve this call (None: it can)."""
        if entry.replay.stale():
            return "a buffer the capture used was replaced (e.g. a parameter reassigned): recording again"
        for name, (shape, dtype) in entry.used.items():
            t = closed.get(name)
            if t is None or t.requires_grad or tuple(t.shape) != shape or t.dtype != dtype:
                return f"{name}, a tensor the step closes over, is gone or changed shape or dtype: recording again"
        for name, (tensor, gpu_buffer) in entry.fixed.items():
            if closed[name] is not tensor or tensor._buf._gpu is not gpu_buffer:
                return (f"{name} is another tensor than in the recordings (the same one in both): "
                        f"recording again")
        return None

    def _copy_in(self, entry: _Signature, leaves: list[Tensor], closed: dict) -> list[tuple]:
        copies = []
        for leaf, private in zip(leaves, entry.private):
            if private is not leaf and private._buf._gpu is not leaf._buf._gpu:
                copies.append(("copy", leaf._buf._gpu, 0, private._buf._gpu, 0, _words(leaf._buf)))
        for name, private in entry.copied.items():
            leaf = closed[name]
            copies.append(("copy", leaf._buf._gpu, 0, private._gpu, 0, _words(leaf._buf)))
        return copies

    def _record(self, entry: _Signature, structure, leaves: list[Tensor], closed: dict):
        self.stats["eager"] += 1
        dev = entry.dev
        for leaf, private in zip(leaves, entry.private):
            if private is not leaf:
                dev.copy(leaf._buf, private._buf)
        # The closed-over inputs' buffers (realizing deferred work before recording), and the
        # step's own buffers for those the last recording read, made before this one.
        buffers = {name: t._buf._gpu for name, t in closed.items() if not t.requires_grad}
        wanted = entry.previous[2] if entry.previous is not None else {}
        for name in wanted:
            t = closed.get(name)
            if t is not None and name not in entry.copied:
                entry.copied[name] = dev.empty(t._buf.len, t._buf.dtype)
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
        used = _read(closed, buffers, recording)
        entry.tries += 1
        previous, entry.previous = entry.previous, (recording, out_structure, used)
        if previous is None:
            entry.reason = "recorded once: replayed from the next call if that one records the same commands"
            self._note(entry.reason)
            return result
        names = list(used)
        if list(previous[2]) != names:
            why = f"the step read other tensors it closes over ({', '.join(previous[2]) or 'none'}, then " \
                  f"{', '.join(names) or 'none'})"
        elif any(tuple(previous[2][n][0].shape) != tuple(used[n][0].shape) for n in names):
            why = "a tensor the step closes over changed shape"
        else:
            why = same_step(previous[0], recording, ([previous[2][n][1] for n in names], [used[n][1] for n in names]))
        if why is None and previous[1] != out_structure:
            why = "the returned values differ in structure"
        if why is None:
            entry.fixed = {n: used[n] for n in names
                           if previous[2][n][0] is used[n][0] and previous[2][n][1] is used[n][1]}
            entry.copied = {n: entry.copied[n] for n in names if n not in entry.fixed}
            entry.used = {n: (tuple(used[n][0].shape), used[n][0].dtype) for n in names}
            rebind = {used[n][1]: private._gpu for n, private in entry.copied.items()}
            changed = written(recording)
            entry.write_back = [n for n in entry.copied if id(used[n][1]) in changed]
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

    def _replay(self, entry: _Signature, leaves: list[Tensor], closed: dict):
        self.stats["replayed"] += 1
        replay = entry.replay
        dev = replay.dev
        structure, outs = entry.outputs
        results, after = [], []
        for gpu_buffer, shape, dtype, buf_dtype, length in outs:
            fresh = dev.empty(length, buf_dtype)
            after.append(("copy", gpu_buffer, 0, fresh._gpu, 0, _words(fresh)))
            results.append(Tensor(fresh, shape, dtype))
        for name in entry.write_back:  # closed-over tensors the step writes in place get its result
            leaf = closed[name]
            after.append(("copy", entry.copied[name]._gpu, 0, leaf._buf._gpu, 0, _words(leaf._buf)))
        replay.run(before=self._copy_in(entry, leaves, closed), after=after)
        return _build(structure, results)
