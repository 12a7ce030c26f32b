"""Casts left alone at the end of a realization (ops/fusion.py `_flush`): casts of several
lengths pending together run as one multi-tensor cast per target dtype (foreach.cast_many), with
numpy's conversion and the bits of the casts run one by one (ANYGPU_FUSE=0: the cast
kernel, nd.launch_cast); a cast of a value computed in the same realization, in its own
run or in one recorded before, gets that value; a captured step replays them."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from f16_bits import needs_f16, same  # (tests/ops/f16_bits.py)

import anygpu as ag
from anygpu.ops import foreach, fusion

# Lengths of one element, odd ones, multiples of 4 (the cast kernel's vec4 form), one and
# several workgroups; each its own run, so each cast is alone.
SIZES = [1, 3, 4, 5, 16, 37, 256, 257, 1000, 4099]
# f32 bits at the edges of f16: 65504, the halfway points 65519 (down) and 65520 (up to inf),
# ties to even, f16 subnormals and half the smallest, an f32 subnormal, -0, inf, NaN.
F32_EDGES = np.array([0x7FC00000, 0x477FE000, 0x477FEFFF, 0x477FF000, 0xC77FF000, 0x3F801000, 0x3F803000,
                      0x38800000, 0x33800000, 0x33000000, 0x33000001, 0x00000001, 0x80000000, 0x7F800000,
                      0xFF800000, 0xFFC00000], np.uint32).view(np.float32)
# f16 bits: NaN, inf, -inf, 65504, subnormals (the smallest, the largest, negative), -0.
F16_EDGES = np.array([0x7E00, 0x7C00, 0xFC00, 0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0400, 0x8000,
                      0xFE00], np.uint16).view(np.float16)


def _arrays(rng, dtype) -> list[np.ndarray]:
    """One array per length of SIZES, values over many magnitudes with the edges of `dtype`
    at the start (each array starting at another edge, so the short ones cover them too)."""
    edges = F32_EDGES if dtype == np.float32 else F16_EDGES
    arrays = []
    for k, n in enumerate(SIZES):
        with np.errstate(over="ignore"):
            a = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 5, n)).astype(dtype)
        first = np.roll(edges, -k)[:n]
        a[:len(first)] = first
        arrays.append(a)
    return arrays


@contextlib.contextmanager
def _launches(dev, fuse: bool):
    """The names of the kernels launched inside, with fusion on or off."""
    dev.synchronize()
    names: list[str] = []
    launch, saved = dev.launch, dev.fuse

    def recorded(kernel, *args, **kwargs):
        names.append(kernel.name)
        return launch(kernel, *args, **kwargs)

    dev.launch, dev.fuse = recorded, fuse
    try:
        yield names
    finally:
        del dev.launch
        dev.fuse = saved


def _cast_all(dev, arrays, dtype: str, fuse: bool):
    """Each array uploaded and cast to dtype; (results read back, kernels launched)."""
    bufs = [dev.upload(a, "f16" if a.dtype == np.float16 else "f32") for a in arrays]
    with _launches(dev, fuse) as names:
        outs = [dev.cast(b, dtype) for b in bufs]
        dev.realize_lazy()
    return [dev.read(o) for o in outs], names


@pytest.mark.parametrize("source,target", [(np.float32, "f16"), (np.float16, "f32")])
def test_casts_pending_together_are_one_dispatch_with_the_cast_kernels_bits(dev, rng, source, target):
    needs_f16(dev)
    arrays = _arrays(rng, source)
    got, names = _cast_all(dev, arrays, target, True)
    plain, plain_names = _cast_all(dev, arrays, target, False)
    assert len(plain_names) == len(SIZES) and all(name.startswith("cast_") for name in plain_names)
    assert len(names) == -(-len(SIZES) // foreach.per_dispatch(dev, 2)) < len(SIZES)
    assert all(name.startswith("foreach_cast[") for name in names)
    want_type = np.float16 if target == "f16" else np.float32
    for a, g, p in zip(arrays, got, plain):
        same(g, p, f"{len(a)} elements, against the cast kernel")
        with np.errstate(over="ignore"):
            same(g, a.astype(want_type), f"{len(a)} elements, against numpy")


def test_both_directions_and_empty_casts(dev, rng):
    """f32 -> f16 and f16 -> f32 casts pending at once: one multi-tensor cast each; an empty
    cast (run at once, not deferred) gives an empty Buffer and leaves the others pending."""
    needs_f16(dev)
    wide, half = _arrays(rng, np.float32)[:5], _arrays(rng, np.float16)[5:]
    bufs = [dev.upload(a) for a in wide] + [dev.upload(a, "f16") for a in half]
    with _launches(dev, True) as names:
        empty = dev.cast(dev.upload(np.zeros(0, np.float32)), "f16")
        outs = [dev.cast(b, "f16" if b.dtype == "f32" else "f32") for b in bufs]
        assert all(o._lazy is not None for o in outs)
        dev.realize_lazy()
    each = -(-5 // foreach.per_dispatch(dev, 2))
    assert len(names) == 2 * each, names
    assert sum(name.startswith("foreach_cast[") and name.endswith("_f32_f16") for name in names) == each
    assert sum(name.startswith("foreach_cast[") and name.endswith("_f16_f32") for name in names) == each
    assert empty.len == 0 and empty.dtype == "f16" and dev.read(empty).size == 0
    with np.errstate(over="ignore"):
        for a, o in zip(wide + half, outs):
            same(dev.read(o), a.astype(np.float16 if a.dtype == np.float32 else np.float32), f"{len(a)} elements")


def test_a_cast_of_a_pending_value_gets_that_value(dev, rng):
    """Casts whose argument is computed in the same realization: in their own run (fused
    with it, not batched), or in a run recorded before (a chain of MAX_NODES ops, which
    ends one kernel: the cast alone after it reads what it wrote, and is batched). Values
    equal the op-by-op run's."""
    needs_f16(dev)
    lengths = (10, 20, 30, 40, 50, 60)
    arrays = [(rng.standard_normal(n) * 3e4).astype(np.float32) for n in lengths]

    def run():
        a10, a20, a30, a40, a50, a60 = (dev.upload(a) for a in arrays)
        negated = dev.unary("neg", a10)
        outs = [negated, dev.cast(negated, "f16"),                   # a cast of a held value of its run
                dev.cast(dev.cast(a20, "f16"), "f32"),               # a cast of a cast
                dev.cast(a30, "f16"), dev.cast(a40, "f16")]          # alone, of realized Buffers
        chain = a50
        for _ in range(fusion.MAX_NODES):
            chain = dev.unary("neg", chain)
        outs.append(dev.cast(chain, "f16"))                          # alone, of a recorded run's value
        chain = a60
        for _ in range(fusion.MAX_NODES - 1):
            chain = dev.unary("neg", chain)
        outs.append(dev.cast(dev.cast(chain, "f16"), "f32"))         # alone, of a recorded f16 value
        dev.realize_lazy()
        return outs

    with _launches(dev, True) as names:
        outs = run()
    got = [dev.read(o) for o in outs]
    with _launches(dev, False) as plain_names:
        plain = [dev.read(o) for o in run()]
    # 10, 20: one fused kernel each; 50, 60: the chain's kernel, then the cast alone; the
    # casts alone of 30, 40, 50 in one multi-tensor cast (60's is the only f16 -> f32).
    batched = -(-3 // foreach.per_dispatch(dev, 2))
    assert len(names) == 4 + batched + 1, names
    assert names.count("fused") == 4 and sum(name.startswith("cast_f16_f32") for name in names) == 1
    assert len(plain_names) == 1 + 1 + 2 + 1 + 1 + (fusion.MAX_NODES + 1) + (fusion.MAX_NODES - 1 + 2)
    for k, (g, p) in enumerate(zip(got, plain)):
        same(g, p, f"result {k}")
    with np.errstate(over="ignore"):
        same(got[1], (-arrays[0]).astype(np.float16), "cast of neg")
        same(got[3], arrays[2].astype(np.float16), "alone")
        same(got[5], arrays[4].astype(np.float16), "after the chain")
        same(got[6], (-arrays[5]).astype(np.float16).astype(np.float32), "after the f16 chain")


def test_a_captured_step_replays_the_batched_casts(dev):
    """anygpu.compile records the multi-tensor cast and replays it with each call's data."""
    needs_f16(dev)

    @ag.compile
    def step(*xs):
        return tuple(x.half() if x.dtype == ag.float32 else x.float() for x in xs)

    for call in range(6):
        call_rng = np.random.default_rng(call)
        arrays = _arrays(call_rng, np.float32)[:4] + _arrays(call_rng, np.float16)[4:8]
        outs = step(*(ag.tensor(a) for a in arrays))
        for a, o in zip(arrays, outs):
            with np.errstate(over="ignore"):
                same(o.numpy(), a.astype(np.float16 if a.dtype == np.float32 else np.float32),
                      f"call {call}, {len(a)} elements")
    assert step.stats["replayed"] >= 3, step.reason()
    (entry,) = step._signatures.values()
    names = [kernel.name for kernel, _, _ in entry.replay._dispatch_info]
    assert "foreach_cast[4]_f32_f16" in names and "foreach_cast[4]_f16_f32" in names, names
    assert not any(name.startswith("cast_") for name in names), names
