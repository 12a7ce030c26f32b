"""The standalone cast kernel (ops/nd.launch_cast) moves 4 elements a thread: a length that is
a multiple of 4 runs the vec4 form in n // 4 threads, any other length one element a thread.
Both give numpy's conversion bit for bit (NaN: a NaN, its sign and payload not asked for, see
assert_converted), and the vec4 form gives the scalar kernel's bits exactly, NaN payloads
included. The launched thread count is checked, so a silent fallback to one element a thread
(or a vec4 launch of a ragged length) fails."""

import numpy as np
import pytest

SIZES = [0, 1, 3, 4, 7, 8, 1000, 1001, 4096 * 3 + 4]
KINDS = ["f32", "f16", "i32", "u32", "bool"]
PAIRS = [(src, dst) for src in KINDS for dst in KINDS if src != dst]
NUMPY = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "u32": np.uint32, "bool": np.bool_}
WORDS = {"f32": np.uint32, "f16": np.uint16}

# f32 values at the edges of the conversion to f16: NaN of either sign with payloads (quiet and
# signalling), +-inf, 65504 (largest f16), 65519 (rounds down to it), 65520 (rounds up to inf),
# 1e-8 (below half the smallest subnormal: 0), the smallest subnormal 2^-24, 2^-25 (a tie: to 0),
# 2^-25 + 1 ulp (up to 2^-24), 3 * 2^-25 (a tie: to 2 * 2^-24), the largest subnormal, the
# smallest normal, 1 + 2^-11 and 1 + 3 * 2^-11 (ties to even), f32 subnormals, +-0, 1e38.
F32_EDGES = np.concatenate([
    np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC12345, 0xFF812345, 0x7F800000, 0xFF800000, 0x00000001,
              0x80000001, 0x80000000], np.uint32).view(np.float32),
    np.array([65504.0, -65504.0, 65519.0, 65520.0, -65520.0, 1e-8, -1e-8, 2.0**-24, -(2.0**-24), 2.0**-25,
              np.nextafter(np.float32(2.0**-25), np.float32(1)), 3 * 2.0**-25, 2.0**-14 - 2.0**-24, 2.0**-14,
              1 + 2.0**-11, 1 + 3 * 2.0**-11, 0.0, 1e38, -1e38, 0.5, -2.5e-3], np.float32)])
# f16 words: NaN of either sign with payloads (quiet and signalling), +-inf, +-65504, the
# smallest and largest subnormals, the smallest normal, -0.
F16_EDGES = np.array([0x7E00, 0xFE00, 0x7C01, 0x7D23, 0xFC01, 0xFFFF, 0x7C00, 0xFC00, 0x7BFF, 0xFBFF, 0x0001,
                      0x8001, 0x03FF, 0x0400, 0x8000], np.uint16).view(np.float16)


def tame(rng, src, dst, n):
    """n values of `src` that numpy's astype to `dst` defines as the kernel does (floats to
    integers within range, integers exact in f32), edges first where they fit."""
    if src in ("f32", "f16"):
        if dst in ("i32", "u32"):  # truncation toward zero; no NaN, inf or out of range
            values = rng.standard_normal(n) * 1000
            values[:min(n, 6)] = [0.0, -0.0, 0.5, -0.5, -1.5, 2.75][:n]
            if dst == "u32":
                values = np.abs(values)
            return values.astype(NUMPY[src])
        values = (rng.standard_normal(n) * 3e4).astype(np.float32)
        edges = F32_EDGES if src == "f32" else F16_EDGES
        values[:min(n, edges.size)] = edges[:n]
        rng.shuffle(values)
        with np.errstate(over="ignore"):
            return values if src == "f32" else values.astype(np.float16)
    if src == "bool":
        return rng.random(n) < 0.5
    values = rng.integers(-(2**24), 2**24, n)  # exact in f32: one rounding to f16, as numpy's
    values[:min(n, 3)] = [0, 65519, 65520][:n]
    return (np.abs(values) if src == "u32" else values).astype(NUMPY[src])


def wild(rng, src, n):
    """n stored words of `src` of every kind: NaN with payloads, inf, subnormals, integers out
    of range of the target (what numpy leaves undefined; compared with the scalar kernel)."""
    if src == "bool":
        return rng.random(n) < 0.5
    if src == "f16":
        return rng.integers(0, 2**16, n, dtype=np.uint16).view(np.float16)
    return rng.integers(0, 2**32, n, dtype=np.uint32).view(NUMPY[src])


def words(values):
    """Float arrays as their stored words; others unchanged."""
    return values.view({2: np.uint16, 4: np.uint32}[values.itemsize]) if values.dtype.kind == "f" else values


def assert_converted(got, want):
    """Bit for bit (sign included) where `want` is not NaN; a NaN wanted is a NaN, of any sign
    and payload: WGSL leaves a converted NaN's sign and payload to the implementation, and
    NVIDIA's f32 <-> f16 conversion returns a canonical positive NaN (as CUDA's cvt and torch
    CUDA's .half() do), while lavapipe and numpy keep the sign."""
    assert got.dtype == want.dtype
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(words(got)[~nan], words(want)[~nan])


def assert_bits(got, want):
    """Bit for bit, NaN payloads included."""
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(words(got), words(want))


@pytest.fixture
def casts(dev, monkeypatch):
    """(vec4 kernel?, threads) of each cast kernel launched while the test runs. (Not the
    dtypes in its name: kernels are cached by their text, and bool -> f32 is u32 -> f32's.)"""
    seen = []
    launch = dev.launch

    def spy(kernel, inputs, outputs, params=(), grid=(1, 1, 1)):
        if kernel.name.startswith("cast_"):
            seen.append((kernel.name.endswith("_vec4"), params[0]))  # params[0]: the threads that convert
        return launch(kernel, inputs, outputs, params, grid)

    monkeypatch.setattr(dev, "launch", spy)
    return seen


@pytest.fixture(params=[False, True], ids=["op_by_op", "fused"])
def fuse(dev, request):
    """Run with fusion off or on (on, an f32 <-> f16 cast alone reaches launch_cast through
    fusion's lone-node path; the other pairs never fuse)."""
    dev.synchronize()
    saved, dev.fuse = dev.fuse, request.param
    yield request.param
    dev.synchronize()
    dev.fuse = saved


def expected_launches(n):
    """One launch of n // 4 vec4 threads for a length that is a multiple of 4, else n threads."""
    if n == 0:
        return []
    return [(True, n // 4)] if n % 4 == 0 else [(False, n)]


def cast(dev, values, src, dst):
    return dev.read(dev.cast(dev.upload(values, dtype=src), dst))


def needs(dev, *kinds):
    if "f16" in kinds and not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("src, dst", PAIRS, ids=[f"{s}-{d}" for s, d in PAIRS])
def test_cast_is_numpys_in_as_many_threads_as_units(dev, rng, casts, fuse, src, dst, n):
    """Every pair and length against numpy's astype; a multiple of 4 in n // 4 threads, and
    the same bits as the scalar kernel (the same values with one more element, a ragged length)."""
    needs(dev, src, dst)
    x = tame(rng, src, dst, n)
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(NUMPY[dst])
    assert_converted(cast(dev, x, src, dst), want)
    assert casts == expected_launches(n)
    if n % 4 == 0 and n:
        casts.clear()
        vec4 = cast(dev, x, src, dst)
        scalar = cast(dev, np.concatenate([x, x[:1]]), src, dst)[:n]
        assert_bits(vec4, scalar)
        assert casts == expected_launches(n) + expected_launches(n + 1)


@pytest.mark.parametrize("src, dst", PAIRS, ids=[f"{s}-{d}" for s, d in PAIRS])
def test_vec4_cast_is_the_scalar_kernel_bit_for_bit(dev, rng, casts, src, dst):
    """Stored words of every kind (NaN payloads, inf, subnormals, floats and integers out of the
    target's range, where numpy is undefined): the vec4 kernel's bits are the scalar kernel's."""
    needs(dev, src, dst)
    n = 4096 * 3 + 4
    x = wild(rng, src, n)
    vec4 = cast(dev, x, src, dst)
    scalar = cast(dev, np.concatenate([x, x[:3]]), src, dst)[:n]
    assert_bits(vec4, scalar)
    assert casts == expected_launches(n) + expected_launches(n + 3)


def test_every_f16_converts_to_f32_exactly(dev, casts):
    """All 65536 f16 words -> f32 in vec4 threads: numpy's values bit for bit (a NaN: a NaN, of
    any sign, see assert_converted), and the scalar kernel's bits, NaNs included."""
    needs(dev, "f16")
    x = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = cast(dev, x, "f16", "f32")
    assert_converted(got, x.astype(np.float32))
    assert_bits(got, cast(dev, np.concatenate([x, x[:1]]), "f16", "f32")[:x.size])
    assert casts == expected_launches(x.size) + expected_launches(x.size + 1)


def test_f32_to_f16_edges_by_their_bits(dev, casts):
    """The f32 -> f16 edges written out (independent of numpy): round to nearest even, overflow
    to inf, NaN stays NaN (of any sign, see assert_converted), -0 and f16 subnormals kept, in vec4
    threads."""
    needs(dev, "f16")
    pairs = [(np.inf, 0x7C00), (-np.inf, 0xFC00), (65504.0, 0x7BFF), (65519.0, 0x7BFF), (65520.0, 0x7C00),
             (-65520.0, 0xFC00), (1e-8, 0x0000), (-1e-8, 0x8000), (-0.0, 0x8000), (2.0**-24, 0x0001),
             (2.0**-25, 0x0000), (3 * 2.0**-25, 0x0002), (2.0**-14 - 2.0**-24, 0x03FF), (1 + 2.0**-11, 0x3C00),
             (1 + 3 * 2.0**-11, 0x3C02), (1e38, 0x7C00)]
    x = np.array([value for value, _ in pairs], np.float32)
    got = cast(dev, x, "f32", "f16").view(np.uint16)
    np.testing.assert_array_equal(got, np.array([bits for _, bits in pairs], np.uint16))
    nans = cast(dev, np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345], np.uint32).view(np.float32),
                "f32", "f16").view(np.uint16)
    assert ((nans & 0x7C00) == 0x7C00).all() and (nans & 0x03FF).all()  # NaN; its sign is the GPU's
    assert casts == expected_launches(x.size) + expected_launches(4)


@pytest.mark.parametrize("src", ["f32", "f16"])
@pytest.mark.parametrize("n", [4, 5])
def test_nan_is_true_as_a_bool(dev, src, n):
    """torch: bool(NaN) is True. A compiler may fold `NaN != 0` to false (lavapipe did), so the
    cast tests NaN by its bits; vec4 (n = 4) and scalar (n = 5) kernels alike."""
    needs(dev, src, "bool")
    x = np.array([np.nan, 0.0, -np.nan, -0.0, np.inf][:n], dtype=NUMPY[src])
    got = cast(dev, x, src, "bool")
    np.testing.assert_array_equal(got.astype(bool), np.array([True, False, True, False, True][:n]))
