"""Flash attention (ops/flash_attention.py, ops/flash_sgmat.py) against torch's CPU SDPA in
float32: forward and gradients, odd lengths, causal, bool and float masks (broadcast),
fully masked rows (torch gives 0 there since 2.5), f16, scale, batch broadcasting, dropout
(against the composed path with the same seed), routing, bad input.

The portable kernels run here (ANYGPU_FLASH=portable). The matrix kernels are compiled
by Tint on Dawn's Null backend (a subprocess); their values are checked where the device
has f16 subgroup matrices: `ANYGPU_RUNTIME=dawn pytest tests/ops/test_flash_attention.py`
on a GPU (the tests named `matrix` skip elsewhere)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import anygpu as ag
import anygpu.nn.functional as F
from anygpu.ops import flash_attention, flash_sgmat, gpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def portable(monkeypatch):
    monkeypatch.setenv("ANYGPU_FLASH", "portable")


def _matrix_here() -> bool:
    """Whether this device runs the matrix kernels (whatever ANYGPU_FLASH routes by default)."""
    limits = flash_sgmat.config(gpu())
    return limits is not None and all(flash_sgmat.subgroups_for(k, 64, 64, *limits) for k in flash_sgmat.KINDS)


def _reference(q, k, v, g, mask=None, causal=False, scale=None):
    tq, tk, tv = (torch.tensor(x, dtype=torch.float32, requires_grad=True) for x in (q, k, v))
    tm = torch.tensor(mask) if mask is not None else None
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal, scale=scale)
    out.backward(torch.tensor(g, dtype=torch.float32))
    return [out.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()]


def _ours(q, k, v, g, mask=None, causal=False, scale=None, dtype=ag.float32):
    aq, ak, av = (ag.tensor(x).to(dtype).requires_grad_() for x in (q, k, v))
    am = ag.tensor(mask) if mask is not None else None
    out = F.scaled_dot_product_attention(aq, ak, av, attn_mask=am, is_causal=causal, scale=scale)
    out.backward(ag.tensor(g).to(dtype))
    return [t.float().numpy() for t in (out, aq.grad, ak.grad, av.grad)]


def _data(rng, qs, ks, vs):
    return [rng.standard_normal(s).astype(np.float32) for s in (qs, ks, vs, qs[:-1] + vs[-1:])]


def _close(got, want, atol=2e-5, rtol=2e-4):
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        assert a.shape == b.shape, name
        np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, err_msg=name)


@pytest.mark.parametrize("b,h,length,source,d,dv,causal", [
    (2, 3, 7, 33, 16, 16, False),
    (1, 2, 33, 33, 32, 32, True),
    (2, 1, 1, 1, 64, 64, True),
    (1, 2, 257, 257, 64, 64, True),
    (1, 1, 9, 20, 80, 48, True),      # causal with length < source: top-left aligned
    (2, 1, 6, 11, 128, 128, False),
    (1, 2, 5, 7, 5, 7, False),        # head dims off a multiple of 4
])
def test_forward_and_gradients_match_torch(portable, b, h, length, source, d, dv, causal):
    rng = np.random.default_rng(length * 100 + d)
    q, k, v, g = _data(rng, (b, h, length, d), (b, h, source, d), (b, h, source, dv))
    _close(_ours(q, k, v, g, causal=causal), _reference(q, k, v, g, causal=causal))


def test_bool_and_float_masks_broadcast_and_scale(portable):
    rng = np.random.default_rng(1)
    q, k, v, g = _data(rng, (2, 3, 9, 32), (2, 3, 13, 32), (2, 3, 13, 16))
    bool_mask = rng.random((9, 13)) > 0.3
    bool_mask[:, 0] = True
    _close(_ours(q, k, v, g, mask=bool_mask, scale=0.3), _reference(q, k, v, g, mask=bool_mask, scale=0.3))
    float_mask = rng.standard_normal((2, 1, 9, 13)).astype(np.float32)   # over batch, broadcast over heads
    _close(_ours(q, k, v, g, mask=float_mask), _reference(q, k, v, g, mask=float_mask))
    per_head = rng.standard_normal((3, 1, 13)).astype(np.float32)         # over heads and keys only
    _close(_ours(q, k, v, g, mask=per_head), _reference(q, k, v, g, mask=per_head))


def test_fully_masked_rows_give_zeros_as_torch(portable):
    rng = np.random.default_rng(2)
    q, k, v, g = _data(rng, (1, 2, 5, 16), (1, 2, 7, 16), (1, 2, 7, 16))
    mask = np.ones((5, 7), bool)
    mask[1] = False
    want = _reference(q, k, v, g, mask=mask)
    got = _ours(q, k, v, g, mask=mask)
    assert np.all(want[0][:, :, 1] == 0) and np.all(got[0][:, :, 1] == 0)
    _close(got, want)
    float_mask = np.where(mask, 0.0, -np.inf).astype(np.float32)
    _close(_ours(q, k, v, g, mask=float_mask), _reference(q, k, v, g, mask=float_mask))


def test_float16_inputs_within_f16_tolerances(portable):
    rng = np.random.default_rng(3)
    q, k, v, g = (x.astype(np.float16).astype(np.float32) for x in
                  _data(rng, (2, 2, 33, 64), (2, 2, 33, 64), (2, 2, 33, 64)))
    got = _ours(q, k, v, g, causal=True, dtype=ag.float16)
    want = _reference(q, k, v, g, causal=True)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=4e-3 * max(1.0, float(np.abs(b).max())), rtol=1e-2)


def test_batch_and_head_broadcasting(portable):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 3, 6, 16)).astype(np.float32)
    k = rng.standard_normal((1, 3, 8, 16)).astype(np.float32)
    v = rng.standard_normal((3, 8, 16)).astype(np.float32)
    g = rng.standard_normal((2, 3, 6, 16)).astype(np.float32)
    _close(_ours(q, k, v, g), _reference(q, k, v, g))


def test_dropout_matches_the_composed_path_with_the_same_seed(monkeypatch):
    rng = np.random.default_rng(5)
    q, k, v, g = _data(rng, (2, 2, 17, 16), (2, 2, 17, 16), (2, 2, 17, 16))
    runs = []
    for setting in ("0", "portable"):
        monkeypatch.setenv("ANYGPU_FLASH", setting)
        ag.manual_seed(7)
        aq, ak, av = (ag.tensor(x).requires_grad_() for x in (q, k, v))
        out = F.scaled_dot_product_attention(aq, ak, av, dropout_p=0.3, is_causal=True)
        out.backward(ag.tensor(g))
        runs.append([t.numpy() for t in (out, aq.grad, ak.grad, av.grad)])
    assert np.count_nonzero(runs[0][0] == 0) > 0
    _close(runs[1], runs[0])


def test_routing(monkeypatch):
    dev = gpu()
    monkeypatch.delenv("ANYGPU_FLASH", raising=False)
    if not _matrix_here():
        assert flash_attention.variant(dev, "f32", 64, 64) is None    # unmeasured: today's path
        assert flash_attention.variant(dev, "f16", 64, 64) is None
    monkeypatch.setenv("ANYGPU_FLASH", "1")
    assert flash_attention.variant(dev, "f32", 64, 64) == "portable"
    assert flash_attention.variant(dev, "f32", 256, 64) is None       # head dims past MAX_EMBED
    assert flash_attention.variant(dev, "f64", 64, 64) is None
    monkeypatch.setenv("ANYGPU_FLASH", "0")
    assert flash_attention.variant(dev, "f16", 64, 64) is None
    calls = []
    real = type(dev).flash_attention
    monkeypatch.setattr(type(dev), "flash_attention", lambda self, *a, **kw: calls.append(1) or real(self, *a, **kw))
    x = ag.tensor(np.ones((1, 2, 3, 4), np.float32))
    F.scaled_dot_product_attention(x, x, x)
    assert calls == []
    monkeypatch.setenv("ANYGPU_FLASH", "portable")
    F.scaled_dot_product_attention(x, x, x)
    assert calls == [1]
    w = ag.tensor(np.zeros((3, 3), np.float32)).requires_grad_()   # a mask wanting a gradient: composed
    F.scaled_dot_product_attention(x, x, x, attn_mask=w)
    assert calls == [1]


def test_matrix_variant_is_chosen_for_f16_on_matrix_units(monkeypatch):
    dev = gpu()
    monkeypatch.delenv("ANYGPU_FLASH", raising=False)
    monkeypatch.setattr(flash_sgmat, "config", lambda dev: (49152, 1024))
    assert flash_attention.variant(dev, "f16", 64, 64) == "matrix"     # by default: faster on the H200
    monkeypatch.setenv("ANYGPU_FLASH", "0")
    assert flash_attention.variant(dev, "f16", 64, 64) is None
    monkeypatch.setenv("ANYGPU_FLASH", "matrix")
    assert flash_attention.variant(dev, "f16", 64, 64) == "matrix"
    assert flash_attention.variant(dev, "f16", 80, 80) == "matrix"
    assert flash_attention.variant(dev, "f32", 64, 64) is None
    assert flash_attention.variant(dev, "f16", 40, 40) is None          # not whole 16-wide matrices
    monkeypatch.setattr(flash_sgmat, "config", lambda dev: (16384, 256))
    assert flash_attention.variant(dev, "f16", 128, 128) is None        # does not fit


def test_device_level_sdpa_routes_to_flash(monkeypatch):
    dev = gpu()
    rng = np.random.default_rng(6)
    q, k, v, g = (dev.upload(rng.standard_normal(2 * 9 * 16).astype(np.float32)) for _ in range(4))
    results = []
    for setting in ("0", "portable"):
        monkeypatch.setenv("ANYGPU_FLASH", setting)
        out = dev.scaled_dot_product_attention(q, k, v, 2, 9, 16)
        results.append([dev.read(out)] + [dev.read(x) for x in dev.attention_backward(g, q, k, v, 2, 9, 16)])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=2e-4)


def test_bad_input_is_a_value_error():
    dev = gpu()
    q = dev.upload(np.zeros(2 * 3 * 4, np.float32))
    h = dev.upload(np.zeros(2 * 3 * 4, np.float16))
    with pytest.raises(ValueError, match="flash_attention: q, k, v must share"):
        dev.flash_attention(q, h, q, 2, 3, 3, 4, 4)
    with pytest.raises(ValueError, match="flash_attention: k has"):
        dev.flash_attention(q, q, q, 2, 3, 5, 4, 4)
    with pytest.raises(ValueError, match="needs a seed"):
        dev.flash_attention(q, q, q, 2, 3, 3, 4, 4, dropout_p=0.5)
    with pytest.raises(ValueError, match="too small for strides"):
        dev.flash_attention(q, q, q, 2, 3, 3, 4, 4, mask=dev.upload(np.zeros(9, np.float32)))
    with pytest.raises(ValueError, match="matrix variant takes f16"):
        dev.flash_attention(q, q, q, 2, 3, 3, 4, 4, kind="matrix")


def test_mask_strides_fold_batch_dims():
    for mask_shape, scores in (((2, 1, 9, 13), (2, 3, 9, 13)), ((13,), (2, 3, 9, 13)), ((2, 3, 9, 1), (2, 3, 9, 13)),
                               ((3, 1, 1), (2, 3, 4, 5)), ((2, 1, 1, 4, 5), (2, 3, 2, 4, 5))):
        st = flash_attention.mask_strides(mask_shape, scores)
        values = np.arange(int(np.prod(mask_shape))).reshape(mask_shape)
        want = np.broadcast_to(values, scores).reshape(-1, *scores[-2:])
        z, i, j = np.indices(want.shape)
        got = (z // st.inner) * st.outer_stride + (z % st.inner) * st.inner_stride + i * st.row_stride + j * st.col_stride
        np.testing.assert_array_equal(got, want, err_msg=str(mask_shape))
    assert flash_attention.mask_strides((2, 1, 2, 9, 13), (2, 3, 2, 9, 13)) is None   # three levels: expand


def _positions(r, batch, n, cols):
    z, g, c = np.indices((batch, n, cols))
    return (r.offset + (z // r.inner) * r.outer_stride + (z % r.inner) * r.inner_stride + g * r.row_stride + c).ravel()


@pytest.mark.parametrize("case", ["nanogpt", "spare", "same", "overlap", "broadcast", "two heads apart", "rows cross",
                                  "contiguous", "one view", "one view overlapping"])
def test_disjoint_agrees_with_the_positions(case):
    """flash_attention.disjoint (may q, k, v's gradients be written in place) against the
    positions themselves: never True where two coincide, and True for nanoGPT's split."""
    Rows = flash_attention.Rows
    b, t, h, d = 2, 5, 3, 8
    c = h * d
    heads = lambda width, off: Rows(h, t * width, d, width, off)    # [B, H, T, D] of a [B, T, width]
    views = {
        "nanogpt": [heads(3 * c, 0), heads(3 * c, c), heads(3 * c, 2 * c)],
        "spare": [heads(4 * c, 0), heads(4 * c, 2 * c), heads(4 * c, 3 * c)],
        "same": [heads(c, 0)] * 3,
        "overlap": [heads(3 * c, 0), heads(3 * c, c - 8), heads(3 * c, 2 * c)],
        "broadcast": [heads(3 * c, 0), Rows(h, t * 3 * c, 0, 3 * c, c), heads(3 * c, 2 * c)],
        "two heads apart": [Rows(h, t * 6 * c, 2 * d, 6 * c, off) for off in (0, d, 6 * d)],
        "rows cross": [Rows(h, t * c, d, c // 2, off) for off in (0, 8, 16)],
        "contiguous": [Rows.contiguous(t, d)._replace(offset=off) for off in (0, b * h * t * d, 2 * b * h * t * d)],
        "one view": [heads(3 * c, 0)],
        "one view overlapping": [Rows(h, t * c, d, 8, 0)],
    }[case]
    args = [(r, b * h, t, d) for r in views]
    got = flash_attention.disjoint(args)
    everything = np.concatenate([_positions(*a) for a in args])
    distinct = len(np.unique(everything)) == len(everything)
    assert not got or distinct
    if case in ("nanogpt", "spare", "contiguous", "one view"):
        assert got and distinct
    if case == "two heads apart":   # interleaved heads: distinct, beyond what the test proves
        assert distinct and not got
    if case in ("same", "overlap", "broadcast", "rows cross", "one view overlapping"):
        assert not distinct


def test_in_place_gradients_and_output_rows_are_checked():
    dev = gpu()
    Rows = flash_attention.Rows
    b, t, h, d = 1, 4, 2, 8
    x = dev.upload(np.zeros(b * t * 3 * h * d, np.float16))
    heads = [Rows(h, t * 3 * h * d, d, 3 * h * d, off) for off in (0, h * d, 2 * h * d)]
    out, lse = dev.upload(np.zeros(b * h * t * d, np.float16)), dev.upload(np.zeros(b * h * t, np.float32))
    args = (b * h, t, t, d, d)
    with pytest.raises(ValueError, match="into= needs q, k and v at disjoint positions"):
        dev.flash_attention_backward(out, x, x, x, out, lse, *args, kind="matrix", rows=[heads[0]] * 3, into=x)
    with pytest.raises(ValueError, match="into must have q's dtype"):
        dev.flash_attention_backward(out, x, x, x, out, lse, *args, kind="matrix", rows=heads,
                                     into=dev.upload(np.zeros(b * t * 3 * h * d, np.float32)))
    with pytest.raises(ValueError, match="into's q of 40 elements is too small"):
        dev.flash_attention_backward(out, x, x, x, out, lse, *args, kind="matrix", rows=heads,
                                     into=dev.upload(np.zeros(40, np.float16)))
    with pytest.raises(ValueError, match="into= is served by the matrix variant only"):
        dev.flash_attention_backward(out, out, out, out, out, lse, *args, kind="portable", into=x)
    with pytest.raises(ValueError, match="out_rows .* place two elements of out at one position"):
        dev.flash_attention(x, x, x, *args, kind="matrix", rows=heads, out_rows=Rows(h, t * h * d, 0, h * d))
    with pytest.raises(ValueError, match="portable variant takes contiguous q, k, v and out"):
        dev.flash_attention(out, out, out, *args, kind="portable", out_rows=Rows(h, t * h * d, d, h * d))


@pytest.mark.skipif(importlib.util.find_spec("wgpudawn") is None, reason="needs the extra anygpu[dawn]")
def test_matrix_kernels_compile_with_dawns_compiler():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "attention_flash.py"), "--null"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failed"] == {} and len(report["compiled"]) > 100


@pytest.mark.skipif(not _matrix_here(), reason="needs f16 subgroup matrices (Dawn on a GPU)")
@pytest.mark.parametrize("b,h,length,source,d,dv,causal,masked", [
    (2, 3, 7, 33, 16, 16, False, False),
    (1, 2, 257, 257, 64, 64, True, False),
    (64, 6, 256, 256, 64, 64, True, False),
    (1, 2, 33, 70, 32, 32, False, True),
    (2, 1, 100, 100, 80, 80, True, False),
    (1, 2, 65, 65, 128, 128, False, True),  # (a mask and is_causal together are refused, as torch)
])
def test_matrix_variant_values(monkeypatch, b, h, length, source, d, dv, causal, masked):
    monkeypatch.setenv("ANYGPU_FLASH", "matrix")
    rng = np.random.default_rng(length + d)
    q, k, v, g = (x.astype(np.float16).astype(np.float32) for x in
                  _data(rng, (b, h, length, d), (b, h, source, d), (b, h, source, dv)))
    mask = None
    if masked:
        mask = rng.random((length, source)) > 0.3
        mask[3] = False
    got = _ours(q, k, v, g, mask=mask, causal=causal, dtype=ag.float16)
    want = _reference(q, k, v, g, mask=mask, causal=causal)
    for name, a, w in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(a, w, atol=5e-3 * max(1.0, float(np.abs(w).max())), rtol=2e-2, err_msg=name)


@pytest.mark.skipif(not _matrix_here(), reason="needs f16 subgroup matrices (Dawn on a GPU)")
def test_matrix_variant_dropout_matches_the_portable_one(monkeypatch):
    rng = np.random.default_rng(8)
    q, k, v, g = _data(rng, (2, 2, 40, 32), (2, 2, 40, 32), (2, 2, 40, 32))
    runs = []
    for setting in ("portable", "matrix"):
        monkeypatch.setenv("ANYGPU_FLASH", setting)
        ag.manual_seed(3)
        aq, ak, av = (ag.tensor(x).half().requires_grad_() for x in (q, k, v))
        out = F.scaled_dot_product_attention(aq, ak, av, dropout_p=0.2, is_causal=True)
        out.backward(ag.tensor(g).half())
        runs.append([t.float().numpy() for t in (out, aq.grad, ak.grad, av.grad)])
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, atol=1e-2 * max(1.0, float(np.abs(b).max())), rtol=2e-2)


@pytest.mark.skipif(not _matrix_here(), reason="needs f16 subgroup matrices (Dawn on a GPU)")
@pytest.mark.parametrize("expand", [False, True])
def test_matrix_variant_reads_strided_heads_in_place(monkeypatch, expand):
    """nanoGPT's heads: q, k, v split from one [B, T, 3C] product and viewed [B, H, T, D]
    (flash_attention.Rows, read in place); expand: one key/value head broadcast over the heads
    (a stride-0 batch dim). Values and the gradient of the product against torch."""
    monkeypatch.setenv("ANYGPU_FLASH", "matrix")
    b, t, h, d = 2, 37, 3, 32
    rng = np.random.default_rng(5)
    x = rng.standard_normal((b, t, 3 * h * d)).astype(np.float16).astype(np.float32)
    g = rng.standard_normal((b, h, t, d)).astype(np.float16).astype(np.float32)

    def heads(lib, xt):
        q, k, v = xt.split(h * d, dim=2)
        q = q.view(b, t, h, d).transpose(1, 2)
        if expand:
            k, v = (y[:, :, :d].unsqueeze(1).expand(b, h, t, d) for y in (k, v))
        else:
            k, v = (y.view(b, t, h, d).transpose(1, 2) for y in (k, v))
        return lib.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    ax = ag.tensor(x).half().requires_grad_()
    seen = []
    real = F._flash_rows
    monkeypatch.setattr(F, "_flash_rows", lambda t: seen.append(real(t)) or seen[-1])
    out = heads(ag, ax)
    out.backward(ag.tensor(g).half())
    assert [r.row_stride for _, r in seen] == [3 * h * d] * 3        # read in place, not gathered
    tx = torch.tensor(x, requires_grad=True)
    want = heads(torch, tx)
    want.backward(torch.tensor(g))
    np.testing.assert_allclose(out.float().numpy(), want.detach().numpy(), atol=5e-3, rtol=2e-2)
    np.testing.assert_allclose(ax.grad.float().numpy(), tx.grad.numpy(), atol=1e-2, rtol=2e-2)
