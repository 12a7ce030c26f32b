"""The causal softmax (ops/softmax.py: softmax_causal and its backward, no mask in memory)
and scaled_dot_product_attention(is_causal=True) on it, against torch on the CPU: odd
lengths with T == S, T < S and T > S (torch's is_causal keeps columns c <= row, the lower
triangle aligned top-left), batch and heads, f32, float16 inputs and float16 autocast,
NaN and inf as torch, dropout; the looped kernel and the register forms (ops/row_gen.py:
vec4 and scalar units, subgroup and tree reductions, the exact form) and the tuner's
candidates of both."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import anygpu as ag
import anygpu.nn.functional as F
from anygpu.ops import softmax_tune, tuner
from anygpu.ops.row_gen import RowConfig, configs_for, generate, param_format
from anygpu.runtime import shaders

SHAPES = [(7, 7), (5, 9), (9, 5), (1, 4), (4, 1), (300, 300), (33, 290)]  # (T, S)


def _kept(rows: int, cols: int, length: int) -> np.ndarray:
    return np.arange(cols)[None, :] <= (np.arange(rows) % length)[:, None]


def _torch_causal_softmax(x: np.ndarray, length: int) -> torch.Tensor:
    """torch's softmax of x [rows, cols] plus the 0/-inf causal mask, float64."""
    rows, cols = x.shape
    mask = torch.tensor(np.where(_kept(rows, cols, length), 0.0, -np.inf))
    return torch.softmax(torch.tensor(x, dtype=torch.float64) + mask, dim=1)


def test_torch_is_causal_is_top_left_aligned():
    """The semantics matched below, read from torch itself: row i keeps columns c <= i."""
    for t, s in ((3, 5), (5, 3)):
        q, k = torch.zeros(1, t, 2), torch.zeros(1, s, 2)
        probs = TF.scaled_dot_product_attention(q, k, torch.eye(s)[None], is_causal=True)[0].numpy()
        want = _kept(t, s, t) / np.minimum(np.arange(t) + 1, s)[:, None]
        np.testing.assert_allclose(probs, want, rtol=1e-6)


@pytest.mark.parametrize("t, s", SHAPES)
@pytest.mark.parametrize("size", [None, 32, 256])
def test_softmax_causal_and_backward_match_torch(dev, rng, read, t, s, size):
    blocks = 3
    rows = blocks * t
    x = (rng.standard_normal((rows, s)) * 3).astype(np.float32)
    grad = rng.standard_normal((rows, s)).astype(np.float32)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(np.where(_kept(rows, s, t), 0.0, -np.inf))
    want = torch.softmax(xt + mask, dim=1)
    want.backward(torch.tensor(grad, dtype=torch.float64))
    y = dev.softmax_causal(dev.upload(x), rows, s, t, size=size)
    np.testing.assert_allclose(read(y, (rows, s)), want.detach().numpy(), rtol=1e-5, atol=1e-7)
    assert np.all(read(y, (rows, s))[~_kept(rows, s, t)] == 0.0)
    dx = dev.softmax_causal_backward(dev.upload(grad), y, rows, s, t, size=size)
    np.testing.assert_allclose(read(dx, (rows, s)), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert np.all(read(dx, (rows, s))[~_kept(rows, s, t)] == 0.0)


def test_softmax_causal_f16_storage(dev, rng):
    t, s, rows = 9, 13, 18
    x = (rng.standard_normal((rows, s)) * 3).astype(np.float16)
    grad = rng.standard_normal((rows, s)).astype(np.float16)
    want = _torch_causal_softmax(x.astype(np.float64), t).numpy()
    y = dev.softmax_causal(dev.upload(x), rows, s, t)
    assert y.dtype == "f16"
    got = dev.read(y).reshape(rows, s).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4)
    y64 = got * _kept(rows, s, t)
    g64 = grad.astype(np.float64)
    want_dx = y64 * (g64 - (g64 * y64).sum(axis=1, keepdims=True))
    dx = dev.read(dev.softmax_causal_backward(dev.upload(grad), y, rows, s, t)).reshape(rows, s)
    np.testing.assert_allclose(dx.astype(np.float64), want_dx, rtol=4e-3, atol=2e-3)


def test_softmax_causal_nan_and_inf_as_torch(dev, read):
    """A masked NaN or +inf poisons the row (x + (-inf) is NaN there), a masked -inf or huge
    value does not; a kept NaN, +inf, or a row of kept -inf is NaN throughout."""
    t = s = 6
    x = np.zeros((t, s), np.float32)
    x[0, 3] = np.nan      # masked NaN
    x[1, 5] = np.inf      # masked +inf
    x[2, 4] = -np.inf     # masked -inf: harmless
    x[3, 5] = 3e38        # masked huge: harmless
    x[4, 2] = np.nan      # kept NaN
    x[5, :] = -np.inf     # every kept -inf (and masked nothing)
    x[5, 5] = -np.inf
    want = _torch_causal_softmax(x, t).numpy()
    got = read(dev.softmax_causal(dev.upload(x), t, s, t), (t, s))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)

    # the backward: a non-finite grad at a masked column makes the row NaN (grad * 0 in torch)
    probs = np.where(_kept(t, s, t), 1.0 / (np.arange(t) + 1)[:, None], 0.0).astype(np.float32)
    grad = np.ones((t, s), np.float32)
    grad[1, 4] = np.inf   # masked inf
    grad[2, 5] = np.nan   # masked NaN
    grad[3, 0] = np.inf   # kept inf
    xt = torch.zeros(t, s, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(np.where(_kept(t, s, t), 0.0, -np.inf))
    torch.softmax(xt + mask, dim=1).backward(torch.tensor(grad, dtype=torch.float64))
    got = read(dev.softmax_causal_backward(dev.upload(grad), dev.upload(probs), t, s, t), (t, s))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(xt.grad.numpy()))
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_softmax_causal_checks_its_arguments(dev):
    with pytest.raises(ValueError, match="multiple of length"):
        dev.softmax_causal(dev.upload(np.zeros(10, np.float32)), 5, 2, 2)
    with pytest.raises(ValueError, match="x"):
        dev.softmax_causal(dev.upload(np.zeros(9, np.float32)), 5, 2, 5)


# ------------------------------------------------------------------ register forms (ops/row_gen.py)

# (cols, length): odd row lengths of scalar units (7, 33, 257), vec4 rows (100, 256, 300),
# length == cols, length < cols (rows never reach the row's end) and length > cols (rows
# past cols keep the whole row); 256 x 256 is nanoGPT's and a capacity (the exact form).
REGISTER_SHAPES = [(7, 7), (7, 12), (33, 20), (100, 100), (100, 300), (257, 257), (257, 61), (256, 256), (300, 37)]
REGISTER_CASES = [(cols, length, config) for cols, length in REGISTER_SHAPES for config in configs_for(cols, 256, True)]


def _register_id(case):
    return f"{case[0]}x{case[1]}-{case[2].name}"


def _needs(dev, config):
    if config.subgroup and "subgroup" not in dev.features:
        pytest.skip("the adapter has no subgroups")


def _torch_forward_backward(x64: np.ndarray, grad64: np.ndarray, length: int):
    """torch's causal softmax of x (softmax of x plus the 0/-inf mask) and its gradient by
    autograd, float64."""
    rows, cols = x64.shape
    xt = torch.tensor(x64, requires_grad=True)
    mask = torch.tensor(np.where(_kept(rows, cols, length), 0.0, -np.inf))
    y = torch.softmax(xt + mask, dim=1)
    y.backward(torch.tensor(grad64))
    return y.detach().numpy(), xt.grad.numpy()


def test_register_cases_cover_the_forms():
    """The cases hold vec4 and scalar units, both reductions, several units per thread and
    the exact form (a row of exactly a config's capacity)."""
    configs = [case[2] for case in REGISTER_CASES]
    assert {c.vec for c in configs} == {True, False} and {c.subgroup for c in configs} == {True, False}
    assert max(c.units for c in configs) >= 9
    assert any(c.capacity() == cols for cols, _, c in REGISTER_CASES)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("case", REGISTER_CASES, ids=_register_id)
def test_register_causal_softmax_and_backward_match_torch(dev, rng, case, dtype):
    """Forward and backward of each register config against torch's softmax of x plus the
    causal mask and its autograd gradient, three blocks of `length` rows; the backward is
    given a y whose masked entries are NaN (never used) and still matches."""
    cols, length, config = case
    _needs(dev, config)
    rows = 3 * length
    host_t = np.float16 if dtype == "f16" else np.float32
    x = (rng.standard_normal((rows, cols)) * 3).astype(host_t)
    grad = rng.standard_normal((rows, cols)).astype(host_t)
    kept = _kept(rows, cols, length)
    want_y, want_dx = _torch_forward_backward(x.astype(np.float64), grad.astype(np.float64), length)
    y = dev.softmax_causal(dev.upload(x, dtype), rows, cols, length, size=config)
    assert y.dtype == dtype
    got_y = dev.read(y).reshape(rows, cols).astype(np.float64)
    assert np.all(got_y[~kept] == 0.0)
    tol = (2e-3, 1e-5) if dtype == "f16" else (1e-5, 1e-7)
    np.testing.assert_allclose(got_y, want_y, rtol=tol[0], atol=tol[1])

    poisoned_y = np.where(kept, got_y, np.nan).astype(host_t)  # masked y: NaN, never to be used
    dx = dev.softmax_causal_backward(dev.upload(grad, dtype), dev.upload(poisoned_y, dtype), rows, cols, length,
                                     size=config)
    got_dx = dev.read(dx).reshape(rows, cols).astype(np.float64)
    assert np.all(got_dx[~kept] == 0.0)
    if dtype == "f32":
        np.testing.assert_allclose(got_dx, want_dx, rtol=1e-5, atol=1e-6)
    else:  # torch's backward rule on the same f16 y, masked 0 (its y differs by f16 rounding)
        y64 = torch.tensor(np.where(kept, got_y, 0.0))
        want16 = torch._softmax_backward_data(torch.tensor(grad.astype(np.float64)), y64, 1, torch.float64).numpy()
        np.testing.assert_allclose(got_dx, want16, rtol=4e-3, atol=2e-3 * np.abs(want16).max())


def _edge_rows(cols: int, length: int):
    """Eight blocks of `length` rows with one edge each at a row i < cols - 1 (so the row has
    masked columns): x and grad with NaN and infinities just past the diagonal (inside a
    vec4 unit across it), at the row's end (a unit wholly masked), and kept."""
    room = min(length, cols - 1)
    x = np.zeros((8 * length, cols), np.float32)
    grad = np.ones((8 * length, cols), np.float32)
    for block in range(8):
        i = (3 * block + 1) % room
        r = block * length + i
        edge = {0: (i + 1, np.nan), 1: (cols - 1, np.nan), 2: (i + 1, np.inf), 3: (cols - 1, -np.inf),
                4: (i + 1, 3e38), 5: (0, np.nan), 6: (i, np.inf)}
        if block in edge:
            x[r, edge[block][0]] = edge[block][1]
        else:
            x[r, :i + 1] = -np.inf  # every kept score -inf
        grad_edge = {0: (i + 1, np.inf), 1: (cols - 1, np.nan), 2: (0, np.inf), 3: (cols - 1, 3e38),
                     4: (i + 1, -np.inf), 5: (i, np.nan)}
        if block in grad_edge:
            grad[r, grad_edge[block][0]] = grad_edge[block][1]
    return x, grad


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("case", [c for c in REGISTER_CASES if c[0] in (7, 33, 100, 256)], ids=_register_id)
def test_register_causal_nan_and_inf_as_torch(dev, case, dtype):
    """NaN and infinities, masked and kept, as torch's softmax of x + mask and its autograd:
    a masked NaN or +inf makes the row NaN, a masked -inf or huge value does not; a kept NaN,
    +inf or a row of kept -inf is NaN throughout. Backward: a masked grad not finite (+-inf,
    NaN) makes the row NaN, a finite huge one does not."""
    cols, length, config = case
    _needs(dev, config)
    x, grad = _edge_rows(cols, length)
    rows = x.shape[0]
    host_t = np.float16 if dtype == "f16" else np.float32
    if dtype == "f16":
        x, grad = np.where(x == 3e38, 6e4, x), np.where(grad == 3e38, 6e4, grad)
    with np.errstate(invalid="ignore"):
        want_y, _ = _torch_forward_backward(x.astype(host_t).astype(np.float64), grad.astype(np.float64), length)
    got_y = dev.read(dev.softmax_causal(dev.upload(x.astype(host_t), dtype), rows, cols, length, size=config))
    got_y = got_y.reshape(rows, cols).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got_y), np.isnan(want_y))
    assert np.isnan(want_y).any(axis=1).sum() == 6
    np.testing.assert_allclose(got_y, want_y, rtol=2e-3 if dtype == "f16" else 1e-6, atol=0)

    # the backward on torch's y of finite scores (x without its edges)
    # the backward, given the causal softmax of zeros (1 / kept columns), masked entries 0
    kept = _kept(rows, cols, length)
    probs = (kept / kept.sum(axis=1, keepdims=True)).astype(host_t)
    with np.errstate(invalid="ignore"):
        want_dx = torch._softmax_backward_data(torch.tensor(grad.astype(host_t).astype(np.float64)),
                                               torch.tensor(probs.astype(np.float64)), 1, torch.float64).numpy()
    got_dx = dev.read(dev.softmax_causal_backward(dev.upload(grad.astype(host_t), dtype), dev.upload(probs, dtype),
                                                  rows, cols, length, size=config))
    got_dx = got_dx.reshape(rows, cols).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got_dx), np.isnan(want_dx))
    assert np.isnan(want_dx).any(axis=1).sum() == 5
    finite = np.isfinite(want_dx)
    np.testing.assert_array_equal(got_dx[~finite], want_dx[~finite])  # NaN and -inf where torch's are
    np.testing.assert_allclose(got_dx[finite], want_dx[finite], rtol=4e-3 if dtype == "f16" else 1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["softmax_causal", "softmax_causal_backward"])
def test_register_causal_kernels_write_nothing_past_their_rows(dev, rng, kind):
    """Launched on the first 3 rows of 5-row buffers, the unchecked (trusted) kernels leave
    rows 3-4 untouched, and write every element of rows 0-2."""
    n_in = 1 if kind == "softmax_causal" else 2
    for cols, config in ((100, RowConfig(32, 1, True, False)), (33, RowConfig(32, 2, False, False)),
                         (256, RowConfig(32, 2, True, False))):
        source = generate(kind, config, "f32", cols=cols)
        assert shaders.trusted(source)
        kernel = dev.kernel(f"{kind}[{config.name}]", source, n_in, 1, param_format(kind))
        x = dev.upload(rng.standard_normal(5 * cols).astype(np.float32))
        out = dev.upload(np.full(5 * cols, 7.0, np.float32))
        dev.launch(kernel, [x] * n_in, [out], (3, cols, 3), (3, 1, 1))
        y = dev.read(out)
        assert np.all(y[3 * cols:] == 7.0) and np.all(y[:3 * cols] != 7.0), config.name


def test_register_causal_params_and_checks(dev):
    """The causal kinds' register kernels take the looped kernels' Params (rows, cols, length);
    a config that cannot hold the row is refused."""
    assert param_format("softmax_causal") == param_format("softmax_causal_backward") == "III"
    assert param_format("softmax") == "IIfI"
    code = generate("softmax_causal", RowConfig(32, 1, True, True), "f32")
    assert "struct Params { rows: u32, cols: u32, length: u32 }" in code
    with pytest.raises(ValueError, match="softmax_causal: register config r32x1vg cannot hold rows of 6"):
        dev.softmax_causal(dev.upload(np.zeros(12, np.float32)), 2, 6, 2, size=RowConfig(32, 1, True, True))
    with pytest.raises(ValueError, match="size must be a thread count"):
        dev.softmax_causal(dev.upload(np.zeros(12, np.float32)), 2, 6, 2, size="r32x1vg")


@pytest.mark.parametrize("kind", ["softmax_causal", "softmax_causal_backward"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("cols, length", [(300, 37), (257, 257), (256, 256)])
def test_causal_candidates_pass_the_tuners_float64_check(dev, kind, dtype, cols, length):
    """The tuner offers the looped kernel (its fallback width first, then the other widths)
    and every register config that holds the row; each agrees with the tunable's float64
    reference (which masks independently of the kernels) and parses back from its label."""
    op = (softmax_tune.CAUSAL_F16_TUNABLES if dtype == "f16" else softmax_tune.CAUSAL_TUNABLES)[kind]
    problem = (dtype, 6 * length, cols, length)
    found = op.candidates(dev, problem)
    loops = [c for c in found if isinstance(c, int)]
    registers = [c for c in found if isinstance(c, RowConfig)]
    limit = dev.limits.get("max-compute-invocations-per-workgroup", 256)
    assert found[0] == 256 and sorted(loops) == [32, 64, 128, 256] and found[:4] == loops
    assert registers == configs_for(cols, min(limit, 1024), "subgroup" in dev.features)
    assert registers and all(c.serves(cols) for c in registers)
    if cols == 256:  # nanoGPT's rows: the plain softmax's H200 pick is among them
        assert RowConfig(32, 2, True, "subgroup" in dev.features) in registers
    for candidate in found:
        assert tuner.verify_small(dev, op, candidate, problem), candidate
        assert op.parse(op.label(candidate)) == candidate
    assert softmax_tune.choose(dev, kind, problem) in found


@pytest.mark.parametrize("kind", ["softmax_causal", "softmax_causal_backward"])
def test_causal_register_forms_pass_the_tuner_and_are_chosen(dev, kind, tmp_path, monkeypatch):
    """Tuning times the register configs beside the looped fallback (none dropped as wrong);
    a cached register choice is trusted after its float64 check and then runs by default."""
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    op = softmax_tune.CAUSAL_TUNABLES[kind]
    problem = ("f32", 4 * 64, 256, 64)
    found = op.candidates(dev, problem)
    result = tuner.tune(dev, op, problem, candidates=found, rounds=1, budget_s=0.01)
    assert all(isinstance(v, float) or v.startswith("slow:") for v in result.timings.values()), result.timings
    picked = next(c for c in found if isinstance(c, RowConfig) and not c.subgroup)
    tuner.store(dev, op, problem, tuner.TuneResult(picked, 1e-3))
    tuner.forget_choices(dev)
    try:
        assert softmax_tune.choose(dev, kind, problem) == picked
    finally:
        tuner.forget_choices(dev)
    assert "-mTrue" in op.bucket(problem) and "-mFalse" in op.bucket(("f32", 10, 257, 5))


# ------------------------------------------------------------------ scaled_dot_product_attention

def _sdpa_pair(rng, batch, heads, t, s, embed, embed_v, dtype=np.float32):
    q, k = (rng.standard_normal((batch, heads, n, embed)).astype(dtype) for n in (t, s))
    v = rng.standard_normal((batch, heads, s, embed_v)).astype(dtype)
    weight = rng.standard_normal((batch, heads, t, embed_v)).astype(np.float32)
    return q, k, v, weight


def _torch_sdpa(q, k, v, weight, causal=True):
    """torch float64 on the given values: output and the gradients of sum(out * weight)."""
    ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v)]
    out = TF.scaled_dot_product_attention(*ts, is_causal=causal)
    (out * torch.tensor(weight, dtype=torch.float64)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def _ours(q, k, v, weight, dtype=None, autocast=False):
    ts = [ag.tensor(a, requires_grad=True) for a in (q, k, v)]
    if autocast:
        with ag.autocast("cuda", dtype=ag.float16):
            out = F.scaled_dot_product_attention(*ts, is_causal=True)
    else:
        out = F.scaled_dot_product_attention(*ts, is_causal=True)
    (out.float() * ag.tensor(weight)).sum().backward()
    return out, [t.grad.float().numpy() for t in ts]


def _close(got, want, rtol):
    scale = max(1.0, float(np.abs(want[np.isfinite(want)]).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("t, s", [(7, 7), (5, 9), (9, 5), (1, 3), (3, 1), (37, 37)])
def test_sdpa_causal_f32_forward_and_gradients_match_torch(rng, t, s):
    q, k, v, weight = _sdpa_pair(rng, 2, 3, t, s, 5, 3)
    want, want_grads = _torch_sdpa(q, k, v, weight)
    out, grads = _ours(q, k, v, weight)
    assert out.dtype is ag.float32 and out.shape == (2, 3, t, 3)
    _close(out.numpy(), want, 2e-5)
    for got, expected in zip(grads, want_grads):
        _close(got, expected, 5e-5)


@pytest.mark.parametrize("route", ["half", "autocast"])
@pytest.mark.parametrize("t, s", [(7, 7), (5, 9), (9, 5), (33, 33)])
def test_sdpa_causal_f16_forward_and_gradients_match_torch(rng, route, t, s):
    q, k, v, weight = _sdpa_pair(rng, 2, 2, t, s, 8, 4)
    if route == "half":
        q, k, v = (a.astype(np.float16) for a in (q, k, v))
    rounded = [a.astype(np.float16) for a in (q, k, v)]  # autocast rounds its operands to f16 too
    want, want_grads = _torch_sdpa(*rounded, weight)
    out, grads = _ours(q, k, v, weight, autocast=route == "autocast")
    assert out.dtype is ag.float16
    _close(out.float().numpy(), want, 4e-3)
    for got, expected in zip(grads, want_grads):
        _close(got, expected, 1e-2)


@pytest.mark.parametrize("t, s", [(5, 5), (3, 7), (7, 3)])
@pytest.mark.parametrize("which", ["q", "k", "v"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_sdpa_causal_nan_and_inf_propagate_as_torch(rng, t, s, which, value):
    q, k, v, weight = _sdpa_pair(rng, 1, 2, t, s, 4, 3)
    {"q": q, "k": k, "v": v}[which][0, 1, 1, 0] = value
    want, want_grads = _torch_sdpa(q, k, v, weight)
    out, grads = _ours(q, k, v, weight)
    got = out.numpy()
    np.testing.assert_array_equal(~np.isfinite(got), ~np.isfinite(want))
    _close(np.where(np.isfinite(want), got, 0), np.where(np.isfinite(want), want, 0), 2e-5)
    for got, expected in zip(grads, want_grads):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
        finite = np.isfinite(expected)
        _close(np.where(finite, got, 0), np.where(finite, expected, 0), 5e-5)


@pytest.mark.parametrize("t, s", [(9, 9), (6, 11), (11, 6)])
def test_sdpa_causal_dropout(rng, t, s):
    """With v = [I | R] the output's first s columns are the kept probabilities themselves:
    each is 0 (dropped) or torch's causal probability / (1 - p), 0 above the diagonal; the
    gradients are torch's through that same drop pattern."""
    p = 0.3
    q, k, _, _ = _sdpa_pair(rng, 2, 2, t, s, 4, 1)
    extra = rng.standard_normal((2, 2, s, 3)).astype(np.float32)
    v = np.concatenate([np.broadcast_to(np.eye(s, dtype=np.float32), (2, 2, s, s)), extra], axis=-1)
    weight = rng.standard_normal((2, 2, t, s + 3)).astype(np.float32)
    ts = [ag.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, dropout_p=p, is_causal=True)
    (out * ag.tensor(weight)).sum().backward()
    kept = out.numpy()[..., :s]

    qt, kt, vt = (torch.tensor(a.astype(np.float64), requires_grad=True) for a in (q, k, v))
    mask = torch.tensor(np.where(_kept(t, s, t), 0.0, -np.inf))
    probs = torch.softmax(qt @ kt.transpose(-1, -2) / math.sqrt(4) + mask, dim=-1)
    survived = torch.tensor(kept != 0)
    causal = np.broadcast_to(_kept(t, s, t), kept.shape)
    assert 0.4 < (kept != 0)[causal].mean() < 0.95
    np.testing.assert_allclose(kept[survived.numpy()], (probs / (1 - p))[survived].detach().numpy(), rtol=2e-5)
    assert np.all(kept[~causal] == 0.0)
    expected = (probs * survived / (1 - p)) @ vt
    (expected * torch.tensor(weight, dtype=torch.float64)).sum().backward()
    for got, want in zip(ts, (qt, kt, vt)):
        _close(got.grad.numpy(), want.grad.numpy(), 5e-5)


def test_sdpa_causal_reads_no_mask(rng, monkeypatch):
    """is_causal launches the causal softmax and no broadcast add; an explicit mask still adds."""
    dev = ag.gpu()
    calls = []
    for name in ("softmax_causal", "softmax", "broadcast_binary"):
        original = getattr(type(dev), name)
        monkeypatch.setattr(type(dev), name, lambda self, *a, _o=original, _n=name, **kw: (calls.append(_n),
                                                                                              _o(self, *a, **kw))[1])
    q, k, v, _ = _sdpa_pair(rng, 1, 2, 5, 5, 4, 3)
    F.scaled_dot_product_attention(ag.tensor(q), ag.tensor(k), ag.tensor(v), is_causal=True)
    assert calls == ["softmax_causal"]
    calls.clear()
    mask = ag.tensor(np.triu(np.full((5, 5), -np.inf, np.float32), k=1))
    F.scaled_dot_product_attention(ag.tensor(q), ag.tensor(k), ag.tensor(v), attn_mask=mask)
    assert calls == ["broadcast_binary", "softmax"]




@pytest.mark.parametrize("t, s", [(7, 7), (5, 9), (9, 5)])
def test_sdpa_causal_float64_on_the_host_ops(rng, t, s):
    """float64 tensors take the causal softmax's numpy form (ops/host64): torch's float64
    values to 1e-12."""
    q, k, v, weight = (a.astype(np.float64) for a in _sdpa_pair(rng, 2, 3, t, s, 5, 3))
    want, want_grads = _torch_sdpa(q, k, v, weight)
    ts = [ag.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, is_causal=True)
    assert out.dtype is ag.float64
    (out * ag.tensor(weight.astype(np.float64))).sum().backward()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    for got, expected in zip(ts, want_grads):
        np.testing.assert_allclose(got.grad.numpy(), expected, rtol=1e-11, atol=1e-12)
