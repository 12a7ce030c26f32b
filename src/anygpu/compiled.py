"""`anygpu.compile`: run a training step once per input signature through Python, then
replay its recorded kernels (runtime/capture.py says how and when that is exact).

    step = ag.compile(train_step)        # or @ag.compile on the definition
    loss = step(x, y)                     # same results as train_step(x, y)

The first calls run eagerly while the device records them; when two consecutive
calls recorded the same commands over the same persistent buffers, later calls with
inputs of the same shapes and dtypes copy the inputs into the step's own buffers and
replay the recording in one submit. Returned Tensors are fresh copies each call.

Left eager (correct, not faster), with the reason in `step.reason(*args)`:
a step that reads values back (`.item()`, `.numpy()`, printing), one whose kernel
parameters or uploads change from call to call outside `Device.dynamic` (a dropout
seed drawn on the host, `ag.randn` inside the step), or one whose commands vary.

Inside the step: Tensor arguments are copied into buffers owned by the compiled step
(so the caller's tensors are never overwritten), except tensors that require grad
(parameters), which are passed as they are and must be the same objects on every call.
Parameters' `.grad` tensors keep their identity across replays (they are overwritten
in place, as CUDA-graph training does).

Not guarded (as with CUDA graphs): Python state the step reads without launching a kernel
(a module's train/eval mode, a flag, a scheduler stepped inside the step). After changing
such state, call `step.release()` so the next calls record afresh.
"""

from __future__ import annotations

import functools

from .runtime.capture import Recording, Replay, same_step
from .tensor import Tensor, is_grad_enabled

__all__ = ["compile", "CompiledStep"]


def compile(fn=None, *, max_signatures: int = 4, attempts: int = 4):
    """Wrap a step function for capture and replay (usable as a decorator, with or
    without arguments). max_signatures: input signatures captured at most (others run
    eagerly); attempts: eager calls per signature before giving up on replay."""
    if fn is None:
        return lambda f: CompiledStep(f, max_signatures=max_signatures, attempts=attempts)
    return CompiledStep(fn, max_signatures=max_signatures, attempts=attempts)


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


class _Signature:
    """Everything recorded for one input signature."""

    def __init__(self, args_leaves: list[Tensor]):
        self.state = "recording"  # then "replay" or "eager"
        self.reason: str | None = None
        self.tries = 0
        self.previous: tuple | None = None  # (Recording, output structure) of the last eager call
        self.replay: Replay | None = None
        self.outputs = None  # (structure, [(gpu buffer, shape, dtype, len, nbytes) per Tensor])
        # Private copies of the inputs (parameters, which require grad, pass through as they are).
        self.private = [leaf if leaf.requires_grad else
                        Tensor(leaf._buf._dev.empty(leaf._buf.len, leaf._buf.dtype), leaf.shape, leaf.dtype)
                        for leaf in args_leaves]

    def release(self) -> None:
        if self.replay is not None:
            self.replay.release()
            self.replay = None


class CompiledStep:
    """A step function with capture and replay; see the module docstring."""

    def __init__(self, fn, max_signatures: int = 4, attempts: int = 4):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.max_signatures = max_signatures
        self.attempts = attempts
        self._signatures: dict = {}
        self.stats = {"eager": 0, "replayed": 0}

    def _key(self, args, kwargs):
        leaves: list[Tensor] = []
        structure = _flatten((args, kwargs), leaves)
        sig = tuple((t.shape, t.dtype, t.requires_grad, id(t) if t.requires_grad else None) for t in leaves)
        key = (structure, sig, is_grad_enabled())
        try:
            hash(key)
        except TypeError:
            return None, structure, leaves
        return key, structure, leaves

    def reason(self, *args, **kwargs) -> str | None:
        """Why calls with these arguments' signature are not replayed (None: they are, or
        not yet known)."""
        key, _, _ = self._key(args, kwargs)
        entry = self._signatures.get(key)
        return None if entry is None else entry.reason

    def release(self) -> None:
        """Forget every capture (unpins its buffers); later calls record afresh."""
        for entry in self._signatures.values():
            entry.release()
        self._signatures.clear()

    def __call__(self, *args, **kwargs):
        key, structure, leaves = self._key(args, kwargs)
        if leaves and leaves[0]._buf._dev._recording is not None:
            # Called inside another step being captured: run eagerly so that step records it.
            self.stats["eager"] += 1
            return self.fn(*args, **kwargs)
        entry = self._signatures.get(key) if key is not None else None
        if entry is None:
            if key is None or len(self._signatures) >= self.max_signatures or not leaves:
                self.stats["eager"] += 1
                return self.fn(*args, **kwargs)
            entry = self._signatures[key] = _Signature(leaves)
        if entry.state == "replay":
            if not entry.replay.stale():
                return self._replay(entry, leaves)
            entry.release()  # a persistent buffer was replaced: record again
            entry.state, entry.previous, entry.tries = "recording", None, 0
        if entry.state == "eager":
            self.stats["eager"] += 1
            return self.fn(*args, **kwargs)
        return self._record(entry, structure, leaves)

    def _copy_in(self, entry: _Signature, leaves: list[Tensor]) -> list[tuple]:
        copies = []
        for leaf, private in zip(leaves, entry.private):
            if private is not leaf and private._buf._gpu is not leaf._buf._gpu:
                copies.append(("copy", leaf._buf._gpu, 0, private._buf._gpu, 0, _words(leaf._buf)))
        return copies

    def _record(self, entry: _Signature, structure, leaves: list[Tensor]):
        self.stats["eager"] += 1
        dev = entry.private[0]._buf._dev
        for leaf, private in zip(leaves, entry.private):
            if private is not leaf:
                dev.copy(leaf._buf, private._buf)
        args, kwargs = _build(structure, entry.private)
        recording = Recording(dev)
        recording.start()
        try:
            result = self.fn(*args, **kwargs)
        finally:
            recording.stop()
        out_leaves: list[Tensor] = []
        out_structure = _flatten(result, out_leaves)
        entry.tries += 1
        why = recording.why_not_replayable()
        if why is None:
            touched = set(map(id, recording.buffers()))
            if any(id(t._buf._gpu) not in touched for t in out_leaves):
                why = "the step returns a Tensor it did not compute"
        if why is not None:
            entry.state, entry.reason, entry.previous = "eager", why, None
            return result
        previous, entry.previous = entry.previous, (recording, out_structure)
        if previous is not None:
            why = same_step(previous[0], recording)
            if why is None and previous[1] != out_structure:
                why = "the returned values differ"
            if why is None:
                entry.replay = Replay(recording)
                entry.outputs = (out_structure, [(t._buf._gpu, t.shape, t.dtype, t._buf.dtype, t._buf.len)
                                                 for t in out_leaves])
                entry.state, entry.reason, entry.previous = "replay", None, None
                # This call's outputs live in pinned buffers that the next replay overwrites.
                return _build(out_structure, [t.detach().clone() for t in out_leaves])
            entry.reason = why
            if entry.tries >= self.attempts:
                entry.state, entry.previous = "eager", None
        return result

    def _replay(self, entry: _Signature, leaves: list[Tensor]):
        self.stats["replayed"] += 1
        replay = entry.replay
        dev = replay.dev
        structure, outs = entry.outputs
        results, after = [], []
        for gpu_buffer, shape, dtype, buf_dtype, length in outs:
            fresh = dev.empty(length, buf_dtype)
            after.append(("copy", gpu_buffer, 0, fresh._gpu, 0, _words(fresh)))
            results.append(Tensor(fresh, shape, dtype))
        replay.run(before=self._copy_in(entry, leaves), after=after)
        return _build(structure, results)
