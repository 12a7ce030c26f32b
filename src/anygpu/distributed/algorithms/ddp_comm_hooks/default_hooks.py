"""torch.distributed.algorithms.ddp_comm_hooks.default_hooks: DistributedDataParallel's
built-in communication hooks, with torch's numerics.

    from anygpu.distributed.algorithms.ddp_comm_hooks import default_hooks as default
    ddp.register_comm_hook(None, default.fp16_compress_hook)

allreduce_hook: the plain average (DistributedDataParallel recognises it and keeps its own
overlapped path, as if no hook were registered). fp16_compress_hook: the bucket is rounded
to float16, divided by the world size in float16, summed in float16 across ranks and copied
back into the float32 bucket. fp16_compress_wrapper(hook): the same compression around any
hook. torch's bf16_compress_hook / bf16_compress_wrapper are absent: anygpu has no bfloat16
tensors (docs/PYTORCH.md).
"""

from __future__ import annotations

from typing import Any, Callable

from anygpu.dtypes import float16
from anygpu.futures import Future

__all__ = ["allreduce_hook", "fp16_compress_hook", "fp16_compress_wrapper"]


def _world_size(process_group) -> int:
    from anygpu import distributed as dist

    return process_group.size() if process_group is not None else dist.get_world_size()


def _averaged(process_group, tensor) -> Future:
    """Divide `tensor` by the world size in place (before the sum, so float16 does not
    overflow), all-reduce it; a Future of the averaged tensor."""
    from anygpu import distributed as dist

    tensor.div_(_world_size(process_group))
    work = dist.all_reduce(tensor, async_op=True)
    return work.get_future().then(lambda done: done.value()[0])


def allreduce_hook(process_group, bucket) -> Future:
    """Average the bucket across ranks: what DistributedDataParallel does with no hook."""
    return _averaged(process_group, bucket.buffer())


def fp16_compress_hook(process_group, bucket) -> Future:
    """Send the bucket as float16: round it to float16, divide by the world size (float16),
    all-reduce the float16 tensor, and copy the float16 average back into the bucket's
    float32 buffer, which the Future holds."""
    buffer = bucket.buffer()
    compressed = _averaged(process_group, buffer.to(float16))

    def decompress(done: Future):
        buffer.copy_(done.value())
        return buffer

    return compressed.then(decompress)


def fp16_compress_wrapper(hook: Callable[[Any, Any], Future]) -> Callable[[Any, Any], Future]:
    """A hook that runs `hook` on the bucket rounded to float16 (``bucket.set_buffer``) and
    brings its result back to the bucket's float32 buffer: fp16_compress_wrapper(allreduce_hook)
    is fp16_compress_hook."""

    def fp16_compress_wrapper_hook(hook_state, bucket) -> Future:
        original = bucket.buffer()
        bucket.set_buffer(original.to(float16))
        result = hook(hook_state, bucket)

        def decompress(done: Future):
            original.copy_(done.value())
            return original

        return result.then(decompress)

    return fp16_compress_wrapper_hook
