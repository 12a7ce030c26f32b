"""The register row kernels (ops/row_gen.py: softmax, its backward, layer norm) against torch
on the CPU, for each form (vec4 / scalar units, subgroup / tree reductions), on f32 and f16
storage, with -inf / NaN / huge rows; and the fallback kernels on f16. The kernels are made
as trusted shader modules (no runtime bounds checks): a test checks they write nothing
past the rows they were given."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anygpu.ops import norm_tune, tuner
from anygpu.ops.row_gen import PARAM_FORMAT, RowConfig, configs_for, generate, lean_configs, word_configs
from anygpu.runtime import shaders

# Rows of 300 (vec4 units) and 301 (scalars): 32 threads x 3 units, 64 x 2 / 32 x 10, 64 x 5.
CONFIGS = [RowConfig(32, 3, True, True), RowConfig(64, 2, True, False), RowConfig(32, 10, False, True),
           RowConfig(64, 5, False, False)]


def _cols(config):
    return 300 if config.vec else 301


def _edge_rows(rng, cols):
    x = (rng.standard_normal((6, cols)) * 3).astype(np.float32)
    x[1, :] = -np.inf           # torch: NaN everywhere
    x[2, cols // 2] = np.nan    # NaN row
    x[3, :] *= 1e29             # huge magnitudes
    x[4, ::3] = -np.inf         # some -inf
    x[5, 7] = 3e38
    return x


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_softmax_register_forms_match_torch(dev, rng, upload, read, config):
    cols = _cols(config)
    x = _edge_rows(rng, cols)
    got = read(dev.softmax(upload(x), 6, cols, size=config), x.shape)
    want = torch.softmax(torch.tensor(x, dtype=torch.float64), dim=1).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_softmax_backward_register_forms_match_torch(dev, rng, upload, read, close, vjp, config):
    cols = _cols(config)
    x = (rng.standard_normal((4, cols)) * 3).astype(np.float32)
    grad = rng.standard_normal((4, cols)).astype(np.float32)
    expected, (expected_grad,) = vjp(lambda t: torch.softmax(t, dim=1), [x], grad)
    y = dev.softmax(upload(x), 4, cols, size=config)
    close(read(dev.softmax_backward(upload(grad), y, 4, cols, size=config), x.shape), expected_grad)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("affine", [(True, True), (True, False), (False, False)])
def test_layer_norm_register_forms_match_torch(dev, rng, upload, read, config, affine):
    cols = _cols(config)
    x = (rng.standard_normal((4, cols)) * 3 + 1).astype(np.float32)
    x[2] *= 1e30 / 3  # squares overflow float32: still normalised
    x[3] = 0.5        # constant row: zero deviations
    gamma = rng.standard_normal(cols).astype(np.float32)
    beta = rng.standard_normal(cols).astype(np.float32)
    y, stats = dev.layer_norm(upload(x), upload(gamma) if affine[0] else None, upload(beta) if affine[1] else None,
                              4, cols, 1e-5, config=config)
    t = torch.tensor(x, dtype=torch.float64)
    want = F.layer_norm(t, (cols,), torch.tensor(gamma, dtype=torch.float64) if affine[0] else None,
                        torch.tensor(beta, dtype=torch.float64) if affine[1] else None, 1e-5).numpy()
    np.testing.assert_allclose(read(y, x.shape), want, rtol=1e-4, atol=2e-5)
    mean = x.astype(np.float64).mean(axis=1)
    np.testing.assert_allclose(read(stats, (4, 2))[:, 0], mean, rtol=1e-5, atol=1e-6)


def _layer_norm_rows(rng, cols):
    """Rows for each path of the one-pass layer norm: plain and far-from-zero rows (one
    pass), and those it hands to the two-reduction form: an outlier first element (heavy
    cancellation), squares that overflow, a constant row, NaN and -inf (first or later)."""
    x = (rng.standard_normal((9, cols)) * 3 + 1).astype(np.float32)
    x[1] = rng.standard_normal(cols) + 1e4
    x[2, 0] = 1e3
    x[3] *= 1e30 / 3
    x[4] = 0.5
    x[5, cols // 3] = np.nan
    x[6, cols // 2] = -np.inf
    x[7, 0] = -np.inf
    x[8, 1:] = x[8, 0]  # constant but for its first element
    x[8, 0] += 1
    return x


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("one_pass", [True, False], ids=["one-pass", "two-pass"])
def test_layer_norm_paths_match_torch(dev, rng, upload, read, config, one_pass):
    cols = _cols(config)
    x = _layer_norm_rows(rng, cols)
    gamma = rng.standard_normal(cols).astype(np.float32)
    beta = rng.standard_normal(cols).astype(np.float32)
    y, stats = dev.layer_norm(upload(x), upload(gamma), upload(beta), 9, cols, 1e-5, config=config,
                              one_pass=one_pass)
    t = torch.tensor(x, dtype=torch.float64)
    want = F.layer_norm(t, (cols,), torch.tensor(gamma, dtype=torch.float64),
                        torch.tensor(beta, dtype=torch.float64), 1e-5).numpy()
    got = read(y, x.shape)
    # row 1 (mean 1e4, spread 1): the two-pass form subtracts an f32 mean (off by up to
    # 2^-11 there); the one-pass form subtracts its shift, then the small mean - shift
    far = slice(None) if one_pass else [0, 2, 3, 4, 5, 6, 7, 8]
    np.testing.assert_allclose(got[far], want[far], rtol=1e-4, atol=2e-5, equal_nan=True)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=2e-5 if one_pass else 5e-3)
    assert np.all(got[4] == beta)  # the constant row: exactly zero deviations
    with np.errstate(invalid="ignore"):
        mean = t.mean(dim=1).numpy()
        rstd = (1 / torch.sqrt(t.var(dim=1, unbiased=False) + 1e-5)).numpy()
    got_stats = read(stats, (9, 2))
    finite = [0, 1, 2, 3, 4, 5, 8]  # rows with -inf: y is NaN as torch's, the mean NaN or -inf
    np.testing.assert_allclose(got_stats[finite, 0], mean[finite], rtol=1e-5, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(got_stats[[0, 1, 2, 4, 8], 1], rstd[[0, 1, 2, 4, 8]], rtol=1e-4)


@pytest.mark.parametrize("config", CONFIGS[:2], ids=lambda c: c.name)
def test_layer_norm_tiny_rows_without_eps(dev, rng, upload, read, config):
    """Squares below float32's range (one-pass form: underflow) still normalise."""
    cols = _cols(config)
    x = np.stack([rng.standard_normal(cols) * 1e-25, rng.standard_normal(cols) * 1e-3 + 1]).astype(np.float32)
    y, _ = dev.layer_norm(upload(x), None, None, 2, cols, 0.0, config=config)
    want = F.layer_norm(torch.tensor(x, dtype=torch.float64), (cols,), eps=0.0).numpy()
    np.testing.assert_allclose(read(y, x.shape), want, rtol=1e-4, atol=1e-4)


def test_loop_layer_norm_tiny_rows_without_eps(dev, rng, upload, read):
    """The looped kernel too: eps / unit^2 was 0 / 0 (NaN) at eps 0 for rows near 1e-25."""
    x = np.stack([rng.standard_normal(37) * 1e-25, rng.standard_normal(37) * 1e-3 + 1]).astype(np.float32)
    y, _ = dev.layer_norm(upload(x), None, None, 2, 37, 0.0, config="loop")
    want = F.layer_norm(torch.tensor(x, dtype=torch.float64), (37,), eps=0.0).numpy()
    np.testing.assert_allclose(read(y, x.shape), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("config", ["loop", *CONFIGS[:2]], ids=str)
def test_layer_norm_statistics_at_tiny_scale(dev, rng, upload, read, config):
    """Rows near 1e-20 with eps 1e-5: the variance (1e-40) is below f32's normal range, so
    eps decides rstd (~316). A driver that flushes subnormals (NVIDIA) made eps / unit^2
    infinite and rstd 0, and every gradient through it zero (lib/norm_rstd.wgsl)."""
    cols = 37 if config == "loop" else _cols(config)
    x = (rng.standard_normal((2, cols)) * 1e-20).astype(np.float32)
    y, stats = dev.layer_norm(upload(x), None, None, 2, cols, 1e-5, config=config)
    want = torch.tensor(x, dtype=torch.float64)
    var = want.var(1, unbiased=False)
    np.testing.assert_allclose(read(stats, (2, 2))[:, 1], (1 / torch.sqrt(var + 1e-5)).numpy(), rtol=1e-5)
    np.testing.assert_allclose(read(y, x.shape), F.layer_norm(want, (cols,), eps=1e-5).numpy(),
                               rtol=1e-4, atol=1e-20)


def test_f16_layer_norm_rows_far_from_zero(dev, rng, read):
    x = (rng.standard_normal((3, 300)) + np.array([[0.0], [100.0], [-3000.0]])).astype(np.float16)
    for config in (RowConfig(32, 3, True, True), RowConfig(64, 2, True, False)):
        out, _ = dev.layer_norm(dev.upload(x, "f16"), None, None, 3, 300, 1e-5, config=config)
        want = F.layer_norm(torch.tensor(x, dtype=torch.float64), (300,)).numpy()
        np.testing.assert_allclose(read(out, x.shape).astype(np.float64), want, rtol=4e-3, atol=4e-3)


def test_layer_norm_forms_agree_with_the_loop_kernel(dev, rng, upload, read):
    x = rng.standard_normal((3, 64)).astype(np.float32)
    loop = dev.layer_norm(upload(x), None, None, 3, 64, config="loop")
    for config in configs_for(64, 256, True)[:2]:
        y, stats = dev.layer_norm(upload(x), None, None, 3, 64, config=config)
        np.testing.assert_allclose(read(y), read(loop[0]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(read(stats), read(loop[1]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config", [128, RowConfig(32, 3, True, True), RowConfig(32, 10, False, False)],
                         ids=str)
def test_f16_storage_softmax_and_layer_norm(dev, rng, read, config):
    cols = 301 if isinstance(config, RowConfig) and not config.vec else 300
    x = (rng.standard_normal((3, cols)) * 2).astype(np.float16)
    xb = dev.upload(x, "f16")
    y = dev.softmax(xb, 3, cols, size=config)
    assert y.dtype == "f16"
    want = torch.softmax(torch.tensor(x, dtype=torch.float64), dim=1).numpy()
    np.testing.assert_allclose(read(y, x.shape).astype(np.float64), want, rtol=2e-3, atol=1e-6)
    gamma = rng.standard_normal(cols).astype(np.float16)
    ln_config = config if isinstance(config, RowConfig) else "loop"
    out, stats = dev.layer_norm(xb, dev.upload(gamma, "f16"), None, 3, cols, 1e-5, config=ln_config)
    assert out.dtype == "f16" and stats.dtype == "f32"
    want = F.layer_norm(torch.tensor(x, dtype=torch.float64), (cols,), torch.tensor(gamma, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(read(out, x.shape).astype(np.float64), want, rtol=4e-3, atol=4e-3)


def test_f16_softmax_backward(dev, rng, read):
    x = rng.standard_normal((2, 40)).astype(np.float16)
    grad = rng.standard_normal((2, 40)).astype(np.float16)
    y = dev.softmax(dev.upload(x, "f16"), 2, 40, size=RowConfig(32, 1, True, True))
    dx = dev.softmax_backward(dev.upload(grad, "f16"), y, 2, 40, size=RowConfig(32, 1, True, True))
    yy = read(y).astype(np.float64).reshape(2, 40)
    want = yy * (grad - (grad * yy).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(read(dx, (2, 40)).astype(np.float64), want, rtol=5e-3, atol=1e-3)


def test_bad_inputs_are_value_errors(dev, upload):
    x = upload(np.zeros((2, 10), np.float32))
    with pytest.raises(ValueError, match="softmax: register config r32x1vg cannot hold rows of 10"):
        dev.softmax(x, 2, 10, size=RowConfig(32, 1, True, True))
    with pytest.raises(ValueError, match="softmax: expected f32 or f16"):
        dev.softmax(dev.upload(np.zeros(20, np.int32)), 2, 10)
    with pytest.raises(ValueError, match="layer_norm: gamma is f32 but x is f16"):
        dev.layer_norm(dev.upload(np.zeros(20, np.float16), "f16"), dev.upload(np.ones(10, np.float32)), None, 2, 10)
    with pytest.raises(ValueError, match="row kernel config: cannot parse"):
        RowConfig.parse("r12")


def test_configs_hold_the_row_and_parse_back():
    for cols in (1, 3, 300, 301, 4096, 16384):
        found = configs_for(cols, 1024, True)
        assert found, cols
        for config in found:
            assert config.serves(cols) and RowConfig.parse(config.name) == config
    assert not configs_for(1 << 20, 1024, True)  # longer rows stay on the looped kernel


@pytest.mark.parametrize("kind", ["softmax", "layer_norm"])
def test_trusted_kernels_write_nothing_past_their_rows(dev, rng, kind):
    """Launched on the first 3 rows of 5-row buffers, the unchecked kernels leave rows 3-4
    (and the stats past row 3) untouched: their own bounds checks are all there is."""
    for config in CONFIGS:
        cols = _cols(config)
        source = generate(kind, config, "f32")
        assert shaders.trusted(source)
        n_in, n_out = (1, 1) if kind == "softmax" else (3, 2)
        kernel = dev.kernel(f"{kind}[{config.name}]", source, n_in, n_out, PARAM_FORMAT)
        x_host = rng.standard_normal(5 * cols).astype(np.float32)
        x_host[cols:2 * cols] = 0.5  # a constant row: layer norm's two-reduction path
        x = dev.upload(x_host)
        outs = [dev.upload(np.full(5 * cols, 7.0, np.float32))]
        if kind == "layer_norm":
            outs.append(dev.upload(np.full(10, 7.0, np.float32)))
        dev.launch(kernel, [x] * n_in, outs, (3, cols, 1e-5, 0), (3, 1, 1))
        y = dev.read(outs[0])
        assert np.all(y[3 * cols:] == 7.0) and np.all(y[:3 * cols] != 7.0), config.name
        if kind == "layer_norm":
            assert np.all(dev.read(outs[1])[6:] == 7.0)


def test_trusted_switch(monkeypatch):
    assert shaders.trusted("//! trusted\nfn main() {}")
    assert not shaders.trusted("// not marked\nfn main() {}")
    monkeypatch.setenv("ANYGPU_TRUSTED_SHADERS", "0")
    assert not shaders.trusted("//! trusted\nfn main() {}")


# Layer norm's lean forms (row_gen.lean_configs): "d" (the fallback's deviations made once, stats
# as one vec2) and "h" (also x held as f16 bits). Forced here on the CONFIGS shapes (rows of
# 300 and 301: masked units) and on those the tuner offers for rows of 1000 (4 and 8 units).
LEAN = ([RowConfig(c.wg, c.units, c.vec, c.subgroup, "d") for c in CONFIGS]
        + [RowConfig(c.wg, c.units, c.vec, c.subgroup, "h") for c in CONFIGS if c.vec]
        + lean_configs(1000, 256, True, "f16"))
LEAN_CASES = [(c, dtype) for c in LEAN for dtype in ("f32", "f16") if c.form != "h" or dtype == "f16"]


def _lean_cols(config):
    return (1000 if config.units >= 4 else 300) if config.vec else 301


def _lean_rows(rng, cols, dtype):
    """13 rows: one-pass rows beside every kind the two-reduction fallback takes (an
    outlier first element, NaN, -inf, constant rows, squares out of range)."""
    f16 = dtype == "f16"
    x = (rng.standard_normal((13, cols)) * 3 + 1).astype(np.float32)
    x[1] = rng.standard_normal(cols) + (100.0 if f16 else 1e4)   # far from zero: one pass, shifted
    x[2, cols // 3] = np.nan
    x[3] = 0.5                                                    # constant: exact zeros, y == beta
    x[4, 0] = 300.0 if f16 else 1e3                               # cancellation: the fallback
    x[5, ::3] = -np.inf
    x[6] *= (1e4 if f16 else 1e30) / 3                            # f32: squares overflow
    x[7, 0] = np.inf
    x[8, 1:] = x[8, 0]                                            # constant but for its first element
    x[8, 0] += 1
    x[9] = rng.standard_normal(cols) * (1e-4 if f16 else 1e-20)  # f32: squares below the normal range
    x[10] = -x[10] * 1e3
    return x.astype(np.float16 if f16 else np.float32)


def _within_an_ulp(got, want):
    """Equal, both NaN, or one unit in the last place apart (a driver may contract the
    multiply-adds of two kernels differently)."""
    with np.errstate(invalid="ignore"):
        ulp = np.spacing(np.maximum(np.abs(got), np.abs(want)))
        return bool(np.all((got == want) | (np.isnan(got) & np.isnan(want)) | (np.abs(got - want) <= ulp)))


def test_lean_configs_are_offered_and_parse_back(dev):
    assert [c.name for c in lean_configs(1000, 256, True, "f16")] == ["r32x8vgd", "r32x8vgh", "r64x4vgd", "r64x4vgh"]
    assert [c.name for c in lean_configs(1000, 256, False, "f32")] == ["r32x8vtd", "r64x4vtd"]
    assert [c.name for c in lean_configs(1001, 256, True, "f16")] == ["r64x16sgd", "r128x8sgd", "r256x4sgd"]
    for config in LEAN:
        assert RowConfig.parse(config.name) == config
        assert norm_tune.TUNABLES["f16"].parse(config.name) == config
    found = norm_tune.TUNABLES["f16"].candidates(dev, ("f16", 64, 4096))
    assert {"r128x8vgd", "r128x8vgh", "r256x4vgh"} <= {getattr(c, "name", c) for c in found}
    with pytest.raises(ValueError, match="form 'h'.*needs vec4"):
        RowConfig(32, 10, False, True, "h")
    with pytest.raises(ValueError, match="form must be one of"):
        RowConfig.parse("r32x3vgq")
    with pytest.raises(ValueError, match="softmax: register config r32x3vgd is a layer-norm form"):
        dev.softmax(dev.upload(np.zeros(600, np.float32)), 2, 300, size=RowConfig(32, 3, True, True, "d"))
    with pytest.raises(ValueError, match="layer_norm: register config r32x3vgh holds f16 rows; x is f32"):
        dev.layer_norm(dev.upload(np.zeros(600, np.float32)), None, None, 2, 300,
                       config=RowConfig(32, 3, True, True, "h"))


@pytest.mark.parametrize("config,dtype", LEAN_CASES, ids=lambda v: getattr(v, "name", v))
def test_lean_layer_norm_matches_torch(dev, rng, read, config, dtype):
    cols = _lean_cols(config)
    x = _lean_rows(rng, cols, dtype)
    gamma = rng.standard_normal(cols).astype(x.dtype)
    beta = rng.standard_normal(cols).astype(x.dtype)
    y, stats = dev.layer_norm(dev.upload(x, dtype), dev.upload(gamma, dtype), dev.upload(beta, dtype), 13, cols,
                              1e-5, config=config)
    t = torch.tensor(x, dtype=torch.float64)
    want = F.layer_norm(t, (cols,), torch.tensor(gamma, dtype=torch.float64),
                        torch.tensor(beta, dtype=torch.float64), 1e-5).numpy()
    got = read(y, x.shape).astype(np.float64)
    tol = dict(rtol=4e-3, atol=4e-3) if dtype == "f16" else dict(rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    assert np.all(np.isnan(got[[2, 5, 7]]))
    assert np.all(got[3] == beta.astype(np.float64))
    with np.errstate(invalid="ignore"):
        mean = t.mean(dim=1).numpy()
        rstd = (1 / torch.sqrt(t.var(dim=1, unbiased=False) + 1e-5)).numpy()
    got_stats = read(stats, (13, 2))
    finite = [0, 1, 3, 4, 6, 8, 9, 10, 11, 12]
    np.testing.assert_allclose(got_stats[finite, 0], mean[finite], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_stats[finite, 1], rstd[finite], rtol=1e-4)
    assert np.isnan(got_stats[2, 0])


@pytest.mark.parametrize("config,dtype", LEAN_CASES, ids=lambda v: getattr(v, "name", v))
def test_lean_layer_norm_is_the_existing_kernel(dev, rng, read, config, dtype):
    """The same numbers as the form-less kernel of the same shape (to an ulp), for both of its
    forms (one_pass False: the two-reduction path alone), with and without gamma / beta, at
    eps 0 (rows near 1e-25 in f32) and rows counts of 1, 2 and 7."""
    cols = _lean_cols(config)
    single = RowConfig(config.wg, config.units, config.vec, config.subgroup)
    x = _lean_rows(rng, cols, dtype)
    if dtype == "f32":
        x[11] = rng.standard_normal(cols) * 1e-25
    gamma, beta = (dev.upload(rng.standard_normal(cols).astype(x.dtype), dtype) for _ in range(2))
    for rows, affine, eps, one_pass in ((13, (True, True), 1e-5, True), (13, (True, True), 1e-5, False),
                                        (13, (False, False), 0.0, True), (7, (True, False), 1e-5, True),
                                        (2, (False, True), 1e-5, True), (1, (True, True), 0.0, False)):
        g, b = (buf if on else None for buf, on in zip((gamma, beta), affine))
        xb = dev.upload(x[:rows], dtype)
        y, stats = dev.layer_norm(xb, g, b, rows, cols, eps, config=config, one_pass=one_pass)
        y1, stats1 = dev.layer_norm(xb, g, b, rows, cols, eps, config=single, one_pass=one_pass)
        assert _within_an_ulp(read(y), read(y1)), (rows, affine, eps, one_pass)
        got, want = read(stats, (rows, 2)), read(stats1, (rows, 2))
        assert _within_an_ulp(got[:, 0], want[:, 0])
        plain = [r for r in range(rows) if r not in (2, 5, 7)]  # NaN / inf rows: rstd unspecified
        assert _within_an_ulp(got[plain, 1], want[plain, 1])


def test_lean_kernels_write_nothing_past_their_rows(dev, rng):
    """Trusted modules: on the first 3 rows of 5-row buffers the lean forms leave rows 3-4
    of y and of the stats (stored as vec2) untouched (1e4: no output comes near it)."""
    for config, dtype in LEAN_CASES:
        cols = _lean_cols(config)
        source = generate("layer_norm", config, dtype)
        assert shaders.trusted(source)
        kernel = dev.kernel(f"layer_norm[{config.name}]", source, 3, 2, PARAM_FORMAT)
        host = np.float16 if dtype == "f16" else np.float32
        x_host = rng.standard_normal(5 * cols).astype(host)
        x_host[cols:2 * cols] = 0.5  # a constant row: the two-reduction path
        outs = [dev.upload(np.full(5 * cols, 1e4, host), dtype), dev.upload(np.full(10, 1e4, np.float32))]
        dev.launch(kernel, [dev.upload(x_host, dtype)] * 3, outs, (3, cols, 1e-5, 3), (3, 1, 1))
        y = dev.read(outs[0])
        assert np.all(y[3 * cols:] == 1e4) and np.all(y[:3 * cols] != 1e4), config.name
        stats = dev.read(outs[1])
        assert np.all(stats[6:] == 1e4) and np.all(stats[:6] != 1e4), config.name


@pytest.mark.parametrize("problem", [("f16", 64, 1000), ("f32", 64, 1000), ("f32", 64, 1001)], ids=str)
def test_lean_forms_pass_the_tuner(dev, problem, tmp_path, monkeypatch):
    """The tuner's float64 check and its full-size comparison with the fallback."""
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    op = norm_tune.TUNABLES[problem[0]]
    found = op.candidates(dev, problem)
    lean = [c for c in found if getattr(c, "form", "")]
    assert lean and found[0] == "loop"
    result = tuner.tune(dev, op, problem, candidates=[found[0]] + lean, rounds=1, budget_s=0.01)
    # Every form passed the checks: timed, or (on a loaded machine) dropped as slow -- never as wrong.
    assert all(isinstance(v, float) or v.startswith("slow:") for v in result.timings.values()), result.timings


# f16 layer norm's word forms (row_gen.word_configs): rows read and written as u32 words, "w4"
# (4 halves a unit, the vec4 configs' partition) and "w8" (8 halves, 16-byte loads), each also
# held as bits ("h"). Forced on the shapes the tuner offers for rows of 1000 (both reductions),
# and on small shapes with masked units: rows of 72 (9 units of 8 over 32 threads), 300 and
# 1004 (not multiples of 8: only w4), 8 (one unit).
WORD_CASES = ([(c, 1000) for sub in (True, False) for c in word_configs(1000, 256, sub, "f16")]
              + [(RowConfig(32, 3, True, True, "w8"), 72), (RowConfig(64, 1, True, False, "w8h"), 8),
                 (RowConfig(64, 2, True, False, "w4"), 300), (RowConfig(32, 3, True, True, "w4h"), 300),
                 (RowConfig(64, 4, True, True, "w4"), 1004), (RowConfig(32, 8, True, False, "w4h"), 1004)])


def _word_id(case):
    return f"{case[0].name}-{case[1]}" if isinstance(case, tuple) else str(case)


def _word_rows(rng, cols):
    """_lean_rows in f16, with row 11 at a large mean (2000, spread 16) and row 12 holding
    values of both signs up to f16's largest binade."""
    x = _lean_rows(rng, cols, "f16").astype(np.float32)
    x[11] = rng.standard_normal(cols) * 16 + 2000
    x[12] = np.clip(rng.standard_normal(cols) * 2e4, -6e4, 6e4)
    return x.astype(np.float16)


def _f16_close(got, want, atol):
    """Within one f16 ulp (of the larger) plus atol, or both NaN: an f32 computation rounded
    to f16 may round the other way from another f32 computation's, and near zero (y = beta
    minus about as much) the two f32 results differ by more than an ulp of the result."""
    got, want = got.astype(np.float16), want.astype(np.float16)
    with np.errstate(invalid="ignore"):
        ulp = np.spacing(np.maximum(np.abs(got), np.abs(want))).astype(np.float64)
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        return bool(np.all((got == want) | (np.isnan(got) & np.isnan(want)) | (diff <= ulp + atol)))


def _row_scale(x):
    """Each row's largest finite magnitude (a column vector): what its mean's error is relative to."""
    x = np.abs(x.astype(np.float64))
    return np.where(np.isfinite(x), x, 0).max(axis=1)


def test_word_configs_are_offered_and_parse_back(dev):
    assert [c.name for c in word_configs(1000, 256, True, "f16")] == [
        "r32x4vgw8", "r32x4vgw8h", "r64x2vgw8", "r64x2vgw8h", "r32x8vgw4", "r32x8vgw4h", "r64x4vgw4", "r64x4vgw4h"]
    assert [c.name for c in word_configs(1004, 256, False, "f16")] == ["r32x8vtw4", "r32x8vtw4h", "r64x4vtw4",
                                                                      "r64x4vtw4h"]
    assert word_configs(1001, 256, True, "f16") == [] and word_configs(4096, 1024, True, "f32") == []
    found = {getattr(c, "name", c) for c in norm_tune.TUNABLES["f16"].candidates(dev, ("f16", 64, 4096))}
    assert {"r128x4vgw8", "r128x4vgw8h", "r256x2vgw8", "r128x8vgw4", "r256x4vgw4h"} <= found
    assert not any("w" in getattr(c, "form", "") for c in norm_tune.TUNABLES["f32"].candidates(dev, ("f32", 64, 4096)))
    for config, cols in WORD_CASES:
        assert RowConfig.parse(config.name) == config and config.serves(cols)
    assert RowConfig(64, 2, True, True, "w8").capacity() == 1024
    assert not RowConfig(64, 2, True, True, "w8").serves(1004)  # 8 halves a unit
    with pytest.raises(ValueError, match="form 'w8'.*needs vec4"):
        RowConfig(32, 10, False, True, "w8")
    with pytest.raises(ValueError, match="layer_norm: register config r32x3vgw8 holds f16 rows; x is f32"):
        dev.layer_norm(dev.upload(np.zeros(48, np.float32)), None, None, 2, 24, config=RowConfig(32, 3, True, True, "w8"))
    with pytest.raises(ValueError, match="r32x3vgw8 cannot hold rows of 300 elements"):
        dev.layer_norm(dev.upload(np.zeros(600, np.float16), "f16"), None, None, 2, 300,
                       config=RowConfig(32, 3, True, True, "w8"))


@pytest.mark.parametrize("case", WORD_CASES, ids=_word_id)
def test_word_layer_norm_matches_torch(dev, rng, read, case):
    """float16 in; against torch's float32 layer norm of the same halves rounded to f16 (within
    an f16 ulp), and float64 statistics; NaN / inf / constant / fallback rows as the lean forms."""
    config, cols = case
    x = _word_rows(rng, cols)
    gamma = rng.standard_normal(cols).astype(np.float16)
    beta = rng.standard_normal(cols).astype(np.float16)
    for affine in ((True, True), (False, True), (False, False)):
        g, b = (dev.upload(v, "f16") if on else None for v, on in zip((gamma, beta), affine))
        y, stats = dev.layer_norm(dev.upload(x, "f16"), g, b, 13, cols, 1e-5, config=config)
        t = torch.tensor(x, dtype=torch.float32)
        want = F.layer_norm(t, (cols,), torch.tensor(gamma, dtype=torch.float32) if affine[0] else None,
                            torch.tensor(beta, dtype=torch.float32) if affine[1] else None, 1e-5)
        got = read(y, x.shape)
        assert got.dtype == np.float16
        finite = [0, 1, 3, 4, 6, 8, 9, 10, 11, 12]
        # torch's f32 loses up to ~1e-5 in row 1 (mean 100: it does not shift): atol 5e-5
        assert _f16_close(got[finite], want.to(torch.float16).numpy()[finite], 5e-5), (config.name, affine)
        assert np.all(np.isnan(got[[2, 5, 7]]))
        assert np.all(got[3] == (beta if affine[1] else 0))
        with np.errstate(invalid="ignore"):
            t64 = torch.tensor(x, dtype=torch.float64)
            mean, var = t64.mean(dim=1).numpy(), t64.var(dim=1, unbiased=False).numpy()
        got_stats = read(stats, (13, 2))
        assert np.all(np.abs(got_stats[finite, 0] - mean[finite]) <= 1e-6 * _row_scale(x)[finite])
        np.testing.assert_allclose(got_stats[finite, 1], 1 / np.sqrt(var[finite] + 1e-5), rtol=1e-4)


@pytest.mark.parametrize("case", WORD_CASES, ids=_word_id)
def test_word_layer_norm_agrees_with_the_vec4_forms(dev, rng, read, case):
    """The same numbers as form "d" (w4, w8) or "h" (w4h, w8h) of the vec4 config with as many
    threads holding the same row: a w4 form partitions the row as it does (to an ulp), a w8 form
    sums in another order (within an f16 ulp); for both reductions, with and without gamma /
    beta, at eps 0 and row counts of 1, 2 and 7."""
    config, cols = case
    twin = RowConfig(config.wg, config.units * config.words // 2, True, config.subgroup, "h" if config.held else "d")
    assert twin.serves(cols)
    x = _word_rows(rng, cols)
    gamma, beta = (dev.upload(rng.standard_normal(cols).astype(np.float16), "f16") for _ in range(2))
    for rows, affine, eps, one_pass in ((13, (True, True), 1e-5, True), (13, (True, True), 1e-5, False),
                                        (13, (False, False), 0.0, True), (7, (True, False), 1e-5, True),
                                        (2, (False, True), 1e-5, True), (1, (True, True), 0.0, False)):
        g, b = (buf if on else None for buf, on in zip((gamma, beta), affine))
        xb = dev.upload(x[:rows], "f16")
        y, stats = dev.layer_norm(xb, g, b, rows, cols, eps, config=config, one_pass=one_pass)
        y1, stats1 = dev.layer_norm(xb, g, b, rows, cols, eps, config=twin, one_pass=one_pass)
        if config.words == 2:
            assert _within_an_ulp(read(y), read(y1)), (rows, affine, eps, one_pass)
        else:
            assert _f16_close(read(y), read(y1), 4e-6), (rows, affine, eps, one_pass)
        got, want = read(stats, (rows, 2)), read(stats1, (rows, 2))
        plain = [r for r in range(rows) if r not in (2, 5, 7)]  # NaN / inf rows: rstd unspecified
        if config.words == 2:
            assert _within_an_ulp(got[:, 0], want[:, 0]) and _within_an_ulp(got[plain, 1], want[plain, 1])
        else:  # sums in another order: the mean within 1e-6 of the row's scale; rstd as the
            # one-pass variance allows (up to 8 bits lost to cancellation: 2^-16 relative)
            assert np.all(np.abs(got[plain, 0] - want[plain, 0]) <= 1e-6 * _row_scale(x[:rows])[plain])
            np.testing.assert_allclose(got[plain, 1], want[plain, 1], rtol=3e-5)
            assert np.array_equal(np.isnan(got[:, 0]), np.isnan(want[:, 0]))


@pytest.mark.parametrize("case", WORD_CASES, ids=_word_id)
def test_word_kernels_write_nothing_past_their_rows(dev, rng, case):
    """Trusted modules: on the first 3 rows of 5-row buffers the word forms leave rows 3-4 of y
    and of the stats untouched (1e4: no output comes near it)."""
    config, cols = case
    source = generate("layer_norm", config, "f16")
    assert shaders.trusted(source)
    kernel = dev.kernel(f"layer_norm[{config.name}]", source, 3, 2, PARAM_FORMAT)
    x_host = rng.standard_normal(5 * cols).astype(np.float16)
    x_host[cols:2 * cols] = 0.5  # a constant row: the two-reduction path
    outs = [dev.upload(np.full(5 * cols, 1e4, np.float16), "f16"), dev.upload(np.full(10, 1e4, np.float32))]
    dev.launch(kernel, [dev.upload(x_host, "f16")] * 3, outs, (3, cols, 1e-5, 3), (3, 1, 1))
    y = dev.read(outs[0])
    assert np.all(y[3 * cols:] == 1e4) and np.all(y[:3 * cols] != 1e4), config.name
    stats = dev.read(outs[1])
    assert np.all(stats[6:] == 1e4) and np.all(stats[:6] != 1e4), config.name


@pytest.mark.parametrize("problem", [("f16", 64, 1000), ("f16", 64, 1004)], ids=str)
def test_word_forms_pass_the_tuner_and_are_chosen(dev, problem, tmp_path, monkeypatch):
    """The tuner's float64 check and full-size comparison pass for every word form; a cached
    choice naming one is trusted (float64 check) and then runs as the default layer norm."""
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    op = norm_tune.TUNABLES["f16"]
    found = op.candidates(dev, problem)
    words = [c for c in found if getattr(c, "words", 0)]
    assert words and found[0] == "loop" and (problem[2] % 8 == 0) == any(c.words == 4 for c in words)
    result = tuner.tune(dev, op, problem, candidates=[found[0]] + words, rounds=1, budget_s=0.01)
    assert all(isinstance(v, float) or v.startswith("slow:") for v in result.timings.values()), result.timings
    picked = words[-1 if problem[2] % 8 else 0]  # w4h, or w8 (r32x4vgw8)
    tuner.store(dev, op, problem, tuner.TuneResult(picked, 1e-3))
    tuner.forget_choices(dev)
    assert norm_tune.choose(dev, problem) == picked
    rng = np.random.default_rng(3)
    x = rng.standard_normal(problem[1] * problem[2]).astype(np.float16)
    y, _ = dev.layer_norm(dev.upload(x, "f16"), None, None, problem[1], problem[2])  # the cached word form
    want = F.layer_norm(torch.tensor(x, dtype=torch.float32).reshape(problem[1], -1), (problem[2],), eps=1e-5)
    assert _f16_close(dev.read(y).reshape(problem[1], -1), want.to(torch.float16).numpy(), 5e-5)
    tuner.forget_choices(dev)


# Rows of exactly a config's capacity: 32 x 3 vec4 = 384, 32 x 10 scalars = 320, 32 x 2 units of 8
# halves = 512, 64 x 4 units of 4 halves = 1024.
EXACT_CASES = [("layer_norm", RowConfig(32, 3, True, True), "f32"), ("layer_norm", RowConfig(32, 10, False, True), "f32"),
               ("layer_norm", RowConfig(64, 2, True, False, "d"), "f32"), ("layer_norm", RowConfig(32, 3, True, True), "f16"),
               ("layer_norm", RowConfig(32, 4, True, True, "h"), "f16"),
               ("layer_norm", RowConfig(32, 2, True, True, "w8"), "f16"),
               ("layer_norm", RowConfig(32, 2, True, True, "w8h"), "f16"),
               ("layer_norm", RowConfig(64, 4, True, True, "w4"), "f16"),
               ("softmax", RowConfig(32, 3, True, True), "f32"), ("softmax", RowConfig(32, 10, False, False), "f32"),
               ("softmax", RowConfig(32, 3, True, True), "f16"),
               ("softmax_backward", RowConfig(32, 3, True, True), "f32"),
               ("softmax_backward", RowConfig(64, 2, True, False), "f16")]


def _exact_rows(rng, rows, cols):
    """Random rows with the edges every path must keep: NaN, -inf, a constant row, magnitudes
    whose squares overflow f32 (f16 rows: its largest binade), a large mean against a small spread."""
    x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(np.float32)
    x[1, 5] = np.nan
    x[2, ::7] = -np.inf
    x[3] = 0.5
    x[4] *= 1e30 / 3
    x[5] = rng.standard_normal(cols) * 16 + 2000
    return x


@pytest.mark.parametrize("case", EXACT_CASES, ids=lambda c: f"{c[0]}-{c[1].name}-{c[2]}")
def test_exact_forms_are_the_masked_kernels(dev, rng, read, case):
    """A row of exactly a config's capacity runs the exact form (its length a constant, no unit
    masked): the masked kernel's output (NaN where it has NaN; an ulp apart at most, as NVIDIA's
    compiler contracts the two differently in places), through both layer-norm reductions, with
    and without gamma / beta; the ops pick it for such rows, and only for them."""
    kind, config, dtype = case
    cols, rows = config.capacity(), 7
    host_t = np.float16 if dtype == "f16" else np.float32
    exact, masked = generate(kind, config, dtype, cols=cols), generate(kind, config, dtype)
    assert "let ok0 = true;" in exact and "let ok0 = true;" not in masked
    shorter = cols - config.elements()
    assert "let ok0 = true;" not in generate(kind, config, dtype, cols=shorter)
    x = _exact_rows(rng, rows, cols)
    if dtype == "f16":
        x = np.clip(x, -6e4, 6e4)
    xb = dev.upload(x.astype(host_t), dtype)
    if kind == "layer_norm":
        gamma, beta = (dev.upload(rng.standard_normal(cols).astype(host_t), dtype) for _ in range(2))
        for affine, eps, one_pass in (((True, True), 1e-5, True), ((True, True), 1e-5, False),
                                      ((False, False), 0.0, True), ((True, False), 1e-5, True)):
            g, b = (buf if on else None for buf, on in zip((gamma, beta), affine))
            outs = []
            flags = int(affine[0]) | int(affine[1]) << 1
            for source in (generate(kind, config, dtype, one_pass, cols, flags),
                           generate(kind, config, dtype, one_pass, affine=flags)):
                y, stats = dev.empty(rows * cols, dtype), dev.empty(2 * rows)
                kernel = dev.kernel(f"layer_norm[{config.name}]", source, 3, 2, PARAM_FORMAT)
                dev.launch(kernel, [xb, g or xb, b or xb], [y, stats], (rows, cols, eps, flags), (rows, 1, 1))
                outs.append((read(y), read(stats)))
            y_op, stats_op = dev.layer_norm(xb, g, b, rows, cols, eps, config=config, one_pass=one_pass)
            outs.append((read(y_op), read(stats_op)))
            finite = [0, 3, 4, 5, 6]  # the statistics of rows holding NaN or -inf are unspecified: on an
            # H200 the exact form gives torch's (mean -inf, rstd NaN), the masked one (NaN, 1 / sqrt(eps))
            for got in outs[::2]:
                assert _within_an_ulp(got[0], outs[1][0]), (affine, eps, one_pass)
                assert _within_an_ulp(got[1].reshape(rows, 2)[finite], outs[1][1].reshape(rows, 2)[finite]), \
                    (affine, eps, one_pass)
            assert np.isnan(outs[0][0].reshape(rows, cols)[1]).all() and np.isfinite(outs[0][0][:cols]).all()
        return
    inputs = [xb]
    if kind == "softmax_backward":
        inputs = [dev.upload(rng.standard_normal((rows, cols)).astype(host_t), dtype), dev.softmax(xb, rows, cols)]
    outs = []
    for source in (exact, masked):
        out = dev.empty(rows * cols, dtype)
        dev.launch(dev.kernel(f"{kind}[{config.name}]", source, len(inputs), 1, PARAM_FORMAT), inputs, [out],
                   (rows, cols, 0.0, 0), (rows, 1, 1))
        outs.append(read(out))
    if kind == "softmax":
        outs.append(read(dev.softmax(xb, rows, cols, size=config)))
    else:
        outs.append(read(dev.softmax_backward(inputs[0], inputs[1], rows, cols, size=config)))
    for got in outs[::2]:
        assert _within_an_ulp(got, outs[1])
    assert np.isfinite(outs[0][:cols]).all() and np.isnan(outs[0].reshape(rows, cols)[1]).all()


@pytest.mark.parametrize("name, dtype, cols", [("r32x2vgw8", "f16", 512), ("r32x4vgw4h", "f16", 500),
                                               ("r64x2vgd", "f32", 500), ("r32x3st", "f32", 95)])
def test_layer_norm_gamma_and_beta_are_part_of_the_code(dev, rng, name, dtype, cols):
    """Which of gamma and beta a layer norm has is compiled in (`generate(..., affine)`): the
    kernel reads only those, unconditionally, and fuses the output step; with each of the four
    combinations dev.layer_norm matches torch's f32 layer norm (rounded to f16 for f16 rows)."""
    config = RowConfig.parse(name)
    if config.subgroup and "subgroup" not in dev.features:
        config = RowConfig(config.wg, config.units, config.vec, False, config.form)
    sources = [generate("layer_norm", config, dtype, cols=cols, affine=a) for a in range(4)]
    for a, source in enumerate(sources):
        assert ("gamma[" in source) == bool(a & 1) and ("beta[" in source) == bool(a & 2), a
        assert "P.flags & 1u" not in source and "P.flags & 2u" not in source
    with pytest.raises(ValueError, match="affine must be 0..3"):
        generate("layer_norm", config, dtype, affine=4)
    host = np.float16 if dtype == "f16" else np.float32
    rows = 7
    x = (rng.standard_normal((rows, cols)) * 3 + 2).astype(host)
    x[3] = 0.25   # a constant row: the two-reduction path
    gamma, beta = rng.standard_normal(cols).astype(host), rng.standard_normal(cols).astype(host)
    for a in range(4):
        g = dev.upload(gamma, dtype) if a & 1 else None
        b = dev.upload(beta, dtype) if a & 2 else None
        y, _ = dev.layer_norm(dev.upload(x, dtype), g, b, rows, cols, 1e-5, config=config)
        want = F.layer_norm(torch.from_numpy(x.astype(np.float32)), (cols,),
                            torch.from_numpy(gamma.astype(np.float32)) if a & 1 else None,
                            torch.from_numpy(beta.astype(np.float32)) if a & 2 else None, 1e-5).numpy()
        got = dev.read(y).astype(np.float32).reshape(rows, cols)
        if dtype == "f16":
            np.testing.assert_allclose(got, want.astype(np.float16).astype(np.float32), rtol=2 ** -10, atol=2e-3)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
