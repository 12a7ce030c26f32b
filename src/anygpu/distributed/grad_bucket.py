"""torch.distributed.GradBucket: what a DistributedDataParallel communication hook receives.

A bucket is a flat float32 Tensor of several parameters' gradients (``buffer()``), last
layers first, as DistributedDataParallel groups them (``bucket_cap_mb``). The hook returns
a Future whose value, a Tensor of the bucket's size, becomes those parameters' gradients
(nn/parallel.py, docs/DISTRIBUTED.md "Communication hooks").
"""

from __future__ import annotations

__all__ = ["GradBucket"]


class GradBucket:
    """One bucket of gradients, with torch's methods.

    Unlike torch's, ``gradients()`` are copies of the buffer's pieces, not views into it
    (anygpu's slices are copies): change the bucket through ``buffer()`` or ``set_buffer``."""

    def __init__(self, index: int, count: int, buffer, parameters: list, offsets: list[int]):
        self._index, self._count = index, count
        self._buffer = buffer
        self._parameters = list(parameters)
        self._offsets = list(offsets)

    def __repr__(self) -> str:
        return f"GradBucket(index={self._index}, parameters={len(self._parameters)}, numel={self._buffer.numel()})"

    def index(self) -> int:
        """The bucket's position in the order buckets are reduced (0 first; every rank the same)."""
        return self._index

    def is_last(self) -> bool:
        """Whether this is the last bucket reduced in the iteration (the first layers' gradients)."""
        return self._index == self._count - 1

    def buffer(self):
        """The flat 1-D Tensor of the bucket's gradients (float32 unless set_buffer changed it)."""
        return self._buffer

    def set_buffer(self, buffer) -> None:
        """Replace the bucket's flat Tensor (e.g. by a float16 copy, as fp16_compress_wrapper does)."""
        from anygpu.tensor import Tensor

        if not isinstance(buffer, Tensor) or buffer.numel() != self._buffer.numel():
            got = f"shape {tuple(buffer.shape)}" if isinstance(buffer, Tensor) else type(buffer).__name__
            raise ValueError(f"GradBucket.set_buffer: expected a Tensor of {self._buffer.numel()} elements, got {got}")
        self._buffer = buffer.reshape(-1)

    def parameters(self) -> list:
        """The bucket's parameters, in the order of their gradients in buffer()."""
        return list(self._parameters)

    def gradients(self) -> list:
        """Each parameter's gradient, cut from buffer() and shaped as the parameter (copies)."""
        flat = self._buffer
        return [flat[offset:offset + p.numel()].reshape(p.shape) for p, offset in zip(self._parameters, self._offsets)]
