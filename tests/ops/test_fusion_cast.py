"""Casts between f32 and f16 inside fused kernels (ops/fusion.py): a cast is a conversion
step of a chain, one kernel reads and writes both dtypes, and the values are the op-by-op
kernels' bits (ANYGPU_FUSE=0), NaN, inf and overflow past 65504 included."""

import numpy as np
import pytest

import anygpu as ag
from anygpu.ops import fusion

from test_fusion import UNARY_OPS, _assert_same_bits, _Fuse

# f32 values that test the conversion to f16: NaN with payloads and either sign, inf,
# the largest f16 (65504) and the halfway points around it (65519 rounds down, 65520 up
# to inf), f16 subnormals and the halfway point below the smallest, f32 subnormals, -0.
F32_BITS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC12345, 0xFF812345, 0x7F800000, 0xFF800000,
                     0x477FE000, 0x477FEFFF, 0x477FF000, 0xC77FF000, 0x38800000, 0x33800000, 0x33000000,
                     0x33000001, 0x00000001, 0x80000000, 0x3F800001, 0x3F801000, 0x3F803000], np.uint32)
F16_BITS = np.array([0x7E00, 0xFE00, 0x7C01, 0x7D23, 0xFC01, 0x7C00, 0xFC00, 0x7BFF, 0x0001, 0x8001, 0x03FF,
                     0x8000], np.uint16)


def _f32_specials(n: int) -> np.ndarray:
    return np.resize(F32_BITS, n).view(np.float32)


def _f16_specials(n: int) -> np.ndarray:
    return np.resize(F16_BITS, n).view(np.float16)


def _exact(got, want, msg: str = "") -> None:
    assert got.dtype == want.dtype, msg
    bits = np.uint16 if got.dtype == np.float16 else np.uint32
    np.testing.assert_array_equal(got.view(bits), want.view(bits), err_msg=msg)


def _needs_f16(dev) -> None:
    if not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")


BINARY = ("add", "sub", "mul", "maximum", "minimum")


def _mixed_program(rng, dtypes: list, n_ops: int) -> list:
    """A random program over values of the given dtypes ("f32"/"f16"): casts, unary ops,
    and binary ops of two values of one dtype (with a cast of the second where they
    differ, as the Tensor layer converts mixed operands). Steps: (op, args, alpha, beta)
    with op "cast_f32"/"cast_f16" for casts."""
    steps, kinds = [], list(dtypes)
    for _ in range(n_ops):
        roll = rng.random()
        first = int(rng.integers(len(kinds)))
        if roll < 0.3:
            target = "f16" if kinds[first] == "f32" else "f32"
            steps.append((f"cast_{target}", (first,), 0.0, 0.0))
            kinds.append(target)
        elif roll < 0.65:
            name, _, params = UNARY_OPS[rng.integers(len(UNARY_OPS))]
            steps.append((name, (first,), *params(rng)))
            kinds.append(kinds[first])
        else:
            second = int(rng.integers(len(kinds)))
            if kinds[second] != kinds[first]:
                steps.append((f"cast_{kinds[first]}", (second,), 0.0, 0.0))
                kinds.append(kinds[first])
                second = len(kinds) - 1
            steps.append((BINARY[rng.integers(len(BINARY))], (first, second), 0.0, 0.0))
            kinds.append(kinds[first])
    return steps


def _run(dev, steps, inputs):
    values = [dev.upload(x, "f16" if x.dtype == np.float16 else "f32") for x in inputs]
    for name, args, alpha, beta in steps:
        if name.startswith("cast_"):
            values.append(dev.cast(values[args[0]], name[5:]))
        elif len(args) == 1:
            values.append(dev.unary(name, values[args[0]], alpha, beta))
        else:
            values.append(dev.binary(name, values[args[0]], values[args[1]]))
    return values


@pytest.mark.parametrize("n", [1, 7, 12, 1001, 4100])  # scalar and vec4 kernels
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_mixed_programs_fuse_and_match_op_by_op_bit_for_bit(dev, n, seed):
    _needs_f16(dev)
    rng = np.random.default_rng(seed)
    inputs = [(rng.standard_normal(n) * 3e4).astype(np.float32), _f32_specials(n),
              (rng.standard_normal(n) * 4).astype(np.float16), _f16_specials(n)]
    inputs[0][::3] = np.float32(70000.0) * np.sign(inputs[0][::3])  # overflows f16 when cast
    steps = _mixed_program(rng, ["f32", "f32", "f16", "f16"], 40)
    with _Fuse(dev, True):
        first = dict(dev.stats)
        values = _run(dev, steps, inputs)
        assert all(v._lazy is not None for v in values[4:])  # deferred, casts included
        order = rng.permutation(len(values))
        got = {int(i): dev.read(values[i]) for i in order}
        if n > 1:
            assert dev.stats["dispatches"] - first["dispatches"] < len(steps) // 2
    with _Fuse(dev, False):
        plain = [dev.read(b) for b in _run(dev, steps, inputs)]
    for i, want in enumerate(plain):
        assert got[i].dtype == want.dtype, f"value {i}"
        _assert_same_bits(got[i], want, f"value {i}: {steps[i - 4] if i >= 4 else 'input'}")
        if i >= 4 and steps[i - 4][0].startswith("cast_"):
            # A cast's NaNs keep their bits too, where its argument's bits agree (a NaN's
            # sign from NaN * NaN and the like is the hardware's, and a cast keeps it).
            arg = steps[i - 4][1][0]
            bits = np.uint16 if got[arg].dtype == np.float16 else np.uint32
            same = got[arg].view(bits) == plain[arg].view(bits)
            _exact(got[i][same], want[same], f"value {i}: {steps[i - 4]}")


@pytest.mark.parametrize("n", [20, 23])
def test_casts_in_a_chain_convert_as_numpy(dev, n):
    """f32 -> f16 rounds to nearest even, overflows to inf and keeps NaN a NaN; f16 -> f32
    is exact; f32 -> f16 -> f32 -> f16 is the first rounding; all in one kernel."""
    _needs_f16(dev)
    x = _f32_specials(n)
    h = _f16_specials(n)
    with _Fuse(dev, True):
        first = dict(dev.stats)
        a, b = dev.upload(x), dev.upload(h, "f16")
        half = dev.cast(a, "f16")
        again = dev.cast(dev.cast(half, "f32"), "f16")
        wide = dev.cast(b, "f32")
        negated = dev.cast(dev.unary("neg", wide), "f16")
        got = [dev.read(v) for v in (half, again, wide, negated)]
        assert dev.stats["dispatches"] - first["dispatches"] == 1
        assert dev.stats["fused_kernels"] - first["fused_kernels"] == 1
    with np.errstate(over="ignore", invalid="ignore"):
        want_half = x.astype(np.float16)
        want_wide = h.astype(np.float32)
    nan = np.isnan(x)
    _exact(got[0][~nan], want_half[~nan])
    assert np.isnan(got[0][nan]).all()
    _exact(got[1], got[0])
    nan16 = np.isnan(h)
    _exact(got[2][~nan16], want_wide[~nan16])
    assert np.isnan(got[2][nan16]).all()
    _exact(got[3][~nan16], (-h)[~nan16])
    with _Fuse(dev, False):
        a, b = dev.upload(x), dev.upload(h, "f16")
        half = dev.cast(a, "f16")
        plain = [dev.read(v) for v in (half, dev.cast(dev.cast(half, "f32"), "f16"), dev.cast(b, "f32"),
                                       dev.cast(dev.unary("neg", dev.cast(b, "f32")), "f16"))]
    for g, p in zip(got, plain):
        _exact(g, p)


def test_a_cast_alone_runs_its_own_kernel_and_empty_casts_are_empty(dev, rng):
    _needs_f16(dev)
    x = rng.standard_normal(37).astype(np.float32) * 1e5
    with _Fuse(dev, True):
        a = dev.upload(x)
        dev.synchronize()
        first = dict(dev.stats)
        out = dev.cast(a, "f16")
        assert out._lazy is not None
        got = dev.read(out)
        assert dev.stats["dispatches"] - first["dispatches"] == 1
        assert dev.stats["fused_kernels"] == first["fused_kernels"]
        with np.errstate(over="ignore"):
            _exact(got, x.astype(np.float16))
        empty = dev.cast(dev.upload(np.zeros(0, np.float32)), "f16")
        assert empty.dtype == "f16" and empty.len == 0 and dev.read(empty).size == 0
        assert dev.read(dev.cast(dev.upload(np.array([1.5], np.float32)), "i32"))[0] == 1  # not fused


def test_off_every_cast_is_a_dispatch(dev, rng):
    _needs_f16(dev)
    x = rng.standard_normal(64).astype(np.float32)
    with _Fuse(dev, False):
        a = dev.upload(x)
        dev.synchronize()
        first = dev.stats["dispatches"]
        out = dev.cast(dev.unary("relu", dev.cast(a, "f16")), "f32")
        assert out._lazy is None
        dev.read(out)
        assert dev.stats["dispatches"] - first == 3


def test_a_cast_of_a_product_is_not_its_epilogue(dev, rng):
    """A product's epilogue keeps the product's dtype: the cast of an f16 product (and what
    follows it) runs in the next kernel, with the product's f16 rounding."""
    _needs_f16(dev)
    a = (rng.standard_normal((9, 16)) * 30).astype(np.float16)
    b = (rng.standard_normal((16, 12)) * 30).astype(np.float16)
    residual = rng.standard_normal(9 * 12).astype(np.float32)

    def run():
        product = dev.matmul(dev.upload(a, "f16"), dev.upload(b, "f16"), 9, 12, 16)
        scaled = dev.unary("scale", product, 3.0)
        wide = dev.cast(scaled, "f32")
        return [dev.read(v) for v in (scaled, dev.binary("add", wide, dev.upload(residual)))]

    with _Fuse(dev, True):
        first = dict(dev.stats)
        got = run()
        assert dev.stats["dispatches"] - first["dispatches"] == 2  # product with scale; cast with add
    with _Fuse(dev, False):
        plain = run()
    for g, p in zip(got, plain):
        _exact(g, p)
    np.testing.assert_array_equal(got[1], got[0].astype(np.float32) + residual)


def test_f16_and_f32_ops_of_one_length_share_a_kernel(dev, rng):
    _needs_f16(dev)
    x = rng.standard_normal(100).astype(np.float32)
    h = rng.standard_normal(100).astype(np.float16)
    with _Fuse(dev, True):
        a, b = dev.upload(x), dev.upload(h, "f16")
        dev.synchronize()
        first = dict(dev.stats)
        outs = [dev.unary("tanh", dev.unary("scale", a, 2.0)), dev.unary("relu", dev.unary("neg", b))]
        got = [dev.read(v) for v in outs]
        assert dev.stats["dispatches"] - first["dispatches"] == 1
    assert got[1].dtype == np.float16
    _exact(got[1], np.maximum(-h, np.float16(0)))
    np.testing.assert_allclose(got[0], np.tanh(2 * x), rtol=1e-5, atol=1e-6)


def test_kernel_text_of_one_dtype_is_unchanged_by_mixed_support():
    """Runs of one dtype generate the text they did before mixed runs existed (one
    pipeline per structure, as before), and a mixed run binds each buffer with its type."""
    spec = ("v * alpha", "f16", 1, -1, "tanh(v)", "f16", 1, 0)
    source, _, words = fusion._generate(True, ("f16",), spec, (1,))
    assert "enable f16;" in source and "array<vec4<f16>>" in source and "array<vec4<f32>>" not in source
    assert words == 4
    spec = ("v", "f16", 1, -1, "v", "f32", 1, 0, "a + b", "f32", 2, 1, -2)
    source, _, words = fusion._generate(False, ("f32", "f32"), spec, (0, 2))
    assert "var<storage, read> in0: array<f32>" in source and "var<storage, read> in1: array<f32>" in source
    assert "out0: array<f16>" in source and "out1: array<f32>" in source and "enable f16;" in source
    assert words == 0


def test_autocast_gradients_match_the_unfused_run_bit_for_bit(dev, rng):
    """A small autocast training step (f32 master weights, f16 products, f32 losses): the
    loss and every gradient equal the run with ANYGPU_FUSE=0 bit for bit."""
    _needs_f16(dev)
    from anygpu import nn
    w1 = rng.standard_normal((24, 16)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((8, 24)).astype(np.float32) * 0.3
    x = (rng.standard_normal((6, 16)) * 2).astype(np.float32)
    target = rng.integers(0, 8, 6)

    def step():
        first, second = nn.Linear(16, 24), nn.Linear(24, 8)
        first.load_state_dict({"weight": ag.tensor(w1), "bias": ag.tensor(w1[:, 0].copy())})
        second.load_state_dict({"weight": ag.tensor(w2), "bias": ag.tensor(w2[:, 0].copy())})
        norm = nn.LayerNorm(24)
        with ag.autocast("cuda", dtype=ag.float16):
            h = first(ag.tensor(x))
            h = norm(nn.functional.gelu(h) + h * 0.5)   # f16 chain, then an f32 layer norm
            logits = second(h + first(ag.tensor(x)))     # the weight used twice
            loss = nn.functional.cross_entropy(logits, ag.tensor(target))
        loss.backward()
        params = [first.weight, first.bias, second.weight, second.bias, norm.weight, norm.bias]
        return [loss.detach().numpy()] + [p.grad.numpy() for p in params]

    with _Fuse(dev, True):
        fused = step()
    with _Fuse(dev, False):
        plain = step()
    for k, (g, p) in enumerate(zip(fused, plain)):
        assert g.dtype == np.float32, k
        _exact(g, p, f"gradient {k}")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_an_op_of_one_value_on_both_sides_keeps_nan_and_inf(dev, dtype):
    """x - x is NaN for NaN and inf, x / x too: in a fused kernel both operands are one
    value (or two equal ops merged by the compiler), which a compiler that assumes finite
    math folds to 0 and 1 unless the second goes through an identity of its own."""
    if dtype == "f16":
        _needs_f16(dev)
    x = np.array([np.nan, np.inf, -np.inf, 1.5, 0.0, -2.0, 3.0, 7.0], np.float32).astype(
        np.float16 if dtype == "f16" else np.float32)

    def run():
        a = dev.upload(x, dtype)
        t = dev.unary("tanh", a)
        first, second = dev.unary("neg", a), dev.unary("neg", a)
        return [dev.read(v) for v in (dev.binary("sub", a, a), dev.binary("sub", t, t), dev.binary("div", a, a),
                                      dev.binary("sub", first, second), dev.binary("div", first, second))]

    with _Fuse(dev, True):
        got = run()
    with _Fuse(dev, False):
        plain = run()
    for k, (g, p) in enumerate(zip(got, plain)):
        _assert_same_bits(g, p, f"result {k}")
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got[0], x - x)
        np.testing.assert_array_equal(got[3], x - x)
