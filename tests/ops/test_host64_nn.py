"""float64 forms of the network ops (ops/host64/nn.py): each op called through the Device with
HostBuffers, against torch float64 on the CPU at 1e-12 (gradients by torch.autograd) and
against the same op on float32 GPU Buffers at float32 tolerance."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anygpu.ops import Device
from anygpu.ops.host64 import HOST_OPS
from anygpu.runtime.host import HostBuffer

GROUP = ["attention_probs", "scaled_dot_product_attention", "attention_backward",
         "conv2d", "conv_transpose2d", "conv2d_grad_input", "conv2d_grad_weight", "conv2d_grad_bias",
         "group_norm", "group_norm_backward", "mse_loss",
         "sgd_step", "adam_step", "adam_multi_step", "adadelta_step", "adagrad_step", "rmsprop_step", "nadam_step", "radam_step",
         "adamax_step", "rprop_step",
         "batch_norm_stats", "batch_norm_apply", "batch_norm_backward", "layer_norm", "layer_norm_backward",
         "cross_entropy_rows", "cross_entropy_mean", "cross_entropy_rows_backward",
         "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
         "upsample_nearest2d", "upsample_nearest2d_backward", "unscale_check"]


def near64(actual, expected, rtol: float = 1e-12) -> None:
    """Equal to 1e-12 of the data's magnitude (NaN where expected has NaN, infinities equal)."""
    expected = np.asarray(expected, dtype=np.float64)
    finite = np.abs(expected[np.isfinite(expected)])
    atol = rtol * max(1.0, float(finite.max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64).reshape(expected.shape), expected,
                               rtol=rtol, atol=atol, equal_nan=True)


def near32(actual, expected, tol: float = 2e-4) -> None:
    expected = np.asarray(expected, dtype=np.float64)
    finite = np.abs(expected[np.isfinite(expected)])
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64).reshape(expected.shape), expected,
                               rtol=tol, atol=tol * max(1.0, float(finite.max(initial=0.0))), equal_nan=True)


def both(dev, call, *arrays):
    """call(*buffers) with each array (None passes) as a HostBuffer, then as a float32 GPU
    Buffer -> (results of the float64 run, of the float32 run): Buffers read as numpy, other
    results as they are. A float result of the float64 run must be a HostBuffer."""
    runs = []
    for dtype in ("f64", "f32"):
        bufs = [None if a is None else dev.upload(np.asarray(a, dtype=np.float64 if dtype == "f64" else np.float32),
                                                  dtype) for a in arrays]
        out = call(*bufs)
        out = out if isinstance(out, tuple) else (out,)
        for item in out:
            if dtype == "f64" and getattr(item, "dtype", None) in ("f32", "f64"):
                assert isinstance(item, HostBuffer), f"a float result of the float64 run is {item!r}"
        runs.append(tuple(dev.read(o) if hasattr(o, "dtype") else o for o in out))
    return runs


def t64(a, grad: bool = False):
    return torch.tensor(np.asarray(a, dtype=np.float64), dtype=torch.float64, requires_grad=grad)


# ------------------------------------------------------------------------ registry


def test_every_group_op_has_a_float64_form_with_its_signature():
    """GROUP is every Device method of the group's modules but pool2d_output_size (sizes, no
    Buffers) and update_scale (GradScaler's own float32 scale and u32 flags, never float64)."""
    from anygpu.ops import attention, batchnorm, conv, layernorm, loss, lossfn, norm, optim, pool, scaler, upsample
    modules = {m.__name__ for m in (attention, batchnorm, conv, layernorm, loss, lossfn, norm, optim, pool, scaler,
                                    upsample)}
    methods = {name for name, fn in vars(Device).items()
               if getattr(getattr(fn, "__wrapped__", fn), "__module__", None) in modules}
    assert methods - {"pool2d_output_size", "update_scale"} == set(GROUP)
    for name in GROUP:
        assert name in HOST_OPS, f"{name}: no float64 form"
        gpu_fn = getattr(Device, name).__wrapped__
        gpu_params = list(inspect.signature(gpu_fn).parameters.values())
        host_params = list(inspect.signature(HOST_OPS[name]).parameters.values())
        assert [(p.name, p.kind, p.default) for p in host_params] == \
               [(p.name, p.kind, p.default) for p in gpu_params], name


# ------------------------------------------------------------------------ attention


@pytest.mark.parametrize("bh, s, d", [(3, 5, 7), (1, 1, 2), (2, 9, 4)])
def test_attention_against_torch(dev, rng, bh, s, d):
    q, k, v, go = (rng.standard_normal((bh, s, d)) for _ in range(4))
    qt, kt, vt = t64(q, True), t64(k, True), t64(v, True)
    probs_t = torch.softmax(qt @ kt.transpose(1, 2) / math.sqrt(d), -1)
    out_t = probs_t @ vt
    out_t.backward(t64(go))
    (p64,), (p32,) = both(dev, lambda q_, k_: dev.attention_probs(q_, k_, bh, s, d), q, k)
    near64(p64, probs_t.detach())
    near32(p32, p64)
    (o64,), (o32,) = both(dev, lambda q_, k_, v_: dev.scaled_dot_product_attention(q_, k_, v_, bh, s, d), q, k, v)
    near64(o64, out_t.detach())
    near32(o32, o64)
    for keep in (False, True):
        def backward(go_, q_, k_, v_, keep=keep):
            probs = dev.attention_probs(q_, k_, bh, s, d) if keep else None
            return dev.attention_backward(go_, q_, k_, v_, bh, s, d, probs)
        grads64, grads32 = both(dev, backward, go, q, k, v)
        for g64, g32, ref in zip(grads64, grads32, (qt.grad, kt.grad, vt.grad)):
            near64(g64, ref)
            near32(g32, g64, 1e-3)


def test_attention_nan_row_spreads_as_in_torch(dev, rng):
    bh, s, d = 2, 4, 3
    q, k, v = (rng.standard_normal((bh, s, d)) for _ in range(3))
    q[1, 2, 0] = np.nan
    k[0, 1, 1] = np.inf
    expected = torch.softmax(t64(q) @ t64(k).transpose(1, 2) / math.sqrt(d), -1) @ t64(v)
    out = dev.read(dev.scaled_dot_product_attention(*(dev.upload(a, "f64") for a in (q, k, v)), bh, s, d))
    assert np.isnan(out.reshape(bh, s, d)[1, 2]).all()
    near64(out, expected)


# ---------------------------------------------------------------------- convolutions

# (batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups, bias)
CONV_CASES = [(2, 4, 7, 9, 6, 3, 2, (2, 1), (1, 0), (1, 2), 2, True),
              (1, 3, 5, 4, 3, 1, 1, 1, 0, 1, 3, False),
              (3, 5, 6, 7, 4, 3, 3, 2, 2, 2, 1, True),
              (2, 2, 10, 5, 5, 4, 3, 3, 1, 1, 1, False)]   # the last input row is never read


def _pair(v):
    return (v, v) if isinstance(v, int) else v


@pytest.mark.parametrize("batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups, bias",
                         CONV_CASES)
def test_conv2d_and_gradients_against_torch(dev, rng, batch, in_c, in_h, in_w, out_c, kh, kw, stride,
                                            padding, dilation, groups, bias):
    x = rng.standard_normal((batch, in_c, in_h, in_w))
    w = rng.standard_normal((out_c, in_c // groups, kh, kw))
    b = rng.standard_normal(out_c) if bias else None
    xt, wt = t64(x, True), t64(w, True)
    bt = t64(b, True) if bias else None
    out_t = F.conv2d(xt, wt, bt, stride, padding, dilation, groups)
    out_h, out_w = out_t.shape[2:]
    go = rng.standard_normal(out_t.shape)
    out_t.backward(t64(go))
    (y64,), (y32,) = both(dev, lambda x_, w_, b_: dev.conv2d(x_, w_, b_, batch, in_c, in_h, in_w, out_c, kh, kw,
                                                             stride, padding, dilation, groups), x, w, b)
    near64(y64, out_t.detach())
    near32(y32, y64)
    shape = (batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, stride, padding, dilation, groups)
    (gx64,), (gx32,) = both(dev, lambda go_, w_: dev.conv2d_grad_input(go_, w_, *shape), go, w)
    near64(gx64, xt.grad)
    near32(gx32, gx64)
    (gw64,), (gw32,) = both(dev, lambda x_, go_: dev.conv2d_grad_weight(x_, go_, *shape), x, go)
    near64(gw64, wt.grad)
    near32(gw32, gw64)
    if bias:
        (gb64,), (gb32,) = both(dev, lambda go_: dev.conv2d_grad_bias(go_, batch, out_c, out_h, out_w), go)
        near64(gb64, bt.grad)
        near32(gb32, gb64)


# (batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, output_padding, dilation, groups, bias)
TRANSPOSE_CASES = [(2, 4, 3, 5, 6, 3, 2, (2, 3), (1, 0), (1, 2), 1, 2, True),
                   (1, 3, 4, 4, 2, 2, 3, 1, 1, 0, (2, 1), 1, False),
                   (2, 2, 3, 2, 3, 2, 2, 2, 0, 2, 3, 1, True)]


@pytest.mark.parametrize("batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, output_padding, dilation, "
                         "groups, bias", TRANSPOSE_CASES)
def test_conv_transpose2d_against_torch(dev, rng, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding,
                                        output_padding, dilation, groups, bias):
    x = rng.standard_normal((batch, in_c, in_h, in_w))
    w = rng.standard_normal((in_c, out_c // groups, kh, kw))
    b = rng.standard_normal(out_c) if bias else None
    expected = F.conv_transpose2d(t64(x), t64(w), None if b is None else t64(b), stride, padding, output_padding,
                                  groups, dilation)
    (y64,), (y32,) = both(dev, lambda x_, w_, b_: dev.conv_transpose2d(
        x_, w_, b_, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, output_padding, dilation, groups),
        x, w, b)
    near64(y64, expected)
    near32(y32, y64)


def test_conv_checks_and_non_finite_values(dev, rng):
    x = rng.standard_normal((1, 2, 5, 5))
    x[0, 1, 2, 2] = np.nan
    x[0, 0, 0, 0] = np.inf
    w = rng.standard_normal((3, 2, 2, 2))
    y = dev.read(dev.conv2d(dev.upload(x, "f64"), dev.upload(w, "f64"), None, 1, 2, 5, 5, 3, 2, 2))
    near64(y, F.conv2d(t64(x), t64(w)))
    assert np.isnan(y).any() and np.isinf(y).any()
    with pytest.raises(ValueError, match="conv2d: input has"):
        dev.conv2d(dev.upload(x[..., :4], "f64"), dev.upload(w, "f64"), None, 1, 2, 5, 5, 3, 2, 2)
    with pytest.raises(ValueError, match="conv2d: batch must be a positive integer"):
        dev.conv2d(dev.upload(np.zeros(0), "f64"), dev.upload(w, "f64"), None, 0, 2, 5, 5, 3, 2, 2)
    with pytest.raises(ValueError, match="conv_transpose2d: output_padding"):
        dev.conv_transpose2d(dev.upload(x, "f64"), dev.upload(w, "f64"), None, 1, 2, 5, 5, 3, 2, 2,
                             stride=1, output_padding=1)
    with pytest.raises(ValueError, match="conv2d_grad_input: out_h x out_w"):
        dev.conv2d_grad_input(dev.upload(np.zeros(3 * 16), "f64"), dev.upload(w, "f64"), 1, 2, 5, 5, 3, 4, 4, 2, 2,
                              stride=2)


# ---------------------------------------------------------------------- normalisation


@pytest.mark.parametrize("batch, channels, spatial, groups", [(3, 6, 5, 3), (2, 4, 1, 1), (1, 5, 7, 5)])
def test_group_norm_against_torch(dev, rng, vjp, batch, channels, spatial, groups):
    eps = 1e-5
    x = rng.standard_normal((batch, channels, spatial)) * 0.5 + 30.0
    gamma, beta = rng.standard_normal(channels), rng.standard_normal(channels)
    go = rng.standard_normal(x.shape)
    expected, (gx, ggamma, gbeta) = vjp(lambda x_, g_, b_: F.group_norm(x_, groups, g_, b_, eps), [x, gamma, beta], go)
    (y64,), (y32,) = both(dev, lambda x_, g_, b_: dev.group_norm(x_, g_, b_, batch, channels, spatial, groups, eps),
                          x, gamma, beta)
    near64(y64, expected)
    near32(y32, y64, 2e-3)
    grads64, grads32 = both(dev, lambda go_, x_, g_: dev.group_norm_backward(go_, x_, g_, batch, channels, spatial,
                                                                             groups, eps), go, x, gamma)
    for g64, g32, ref in zip(grads64, grads32, (gx, ggamma, gbeta)):
        near64(g64, ref, 1e-11)   # the inputs' offset of 30 costs a digit: rstd*(x - mean) for |x| = 30
        near32(g32, g64, 5e-3)


def test_group_norm_constant_group_at_eps_zero_is_nan_as_torch(dev):
    x = np.ones((1, 2, 3))
    gamma, beta = np.ones(2), np.zeros(2)
    y = dev.read(dev.group_norm(dev.upload(x, "f64"), dev.upload(gamma, "f64"), dev.upload(beta, "f64"),
                                1, 2, 3, 1, 0.0))
    expected = F.group_norm(t64(x), 1, t64(gamma), t64(beta), 0.0)
    assert np.isnan(expected.numpy()).all()
    near64(y, expected)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_against_torch(dev, rng, vjp, affine):
    batch, channels, spatial, eps, momentum = 3, 4, 5, 1e-5, 0.3
    x = rng.standard_normal((batch, channels, spatial)) * 2.0 + 3.0
    gamma = rng.standard_normal(channels) if affine else None
    beta = rng.standard_normal(channels) if affine else None
    run_mean, run_var = rng.standard_normal(channels), rng.uniform(0.5, 2.0, channels)
    go = rng.standard_normal(x.shape)

    rm_t, rv_t = t64(run_mean), t64(run_var)
    F.batch_norm(t64(x), rm_t, rv_t, training=True, momentum=momentum, eps=eps)
    var_t, mean_t = torch.var_mean(t64(x), dim=(0, 2), unbiased=False)
    rm, rv = dev.upload(run_mean, "f64"), dev.upload(run_var, "f64")
    mean, variance = dev.batch_norm_stats(dev.upload(x, "f64"), batch, channels, spatial, rm, rv, momentum)
    assert all(isinstance(b, HostBuffer) for b in (mean, variance))
    near64(dev.read(mean), mean_t)
    near64(dev.read(variance), var_t)
    near64(dev.read(rm), rm_t)
    near64(dev.read(rv), rv_t)
    rm32, rv32 = dev.upload(run_mean.astype(np.float32)), dev.upload(run_var.astype(np.float32))
    mean32, var32 = dev.batch_norm_stats(dev.upload(x.astype(np.float32)), batch, channels, spatial, rm32, rv32,
                                         momentum)
    near32(dev.read(mean32), mean_t)
    near32(dev.read(var32), var_t)
    near32(dev.read(rv32), rv_t)

    stat_mean, stat_var = mean_t.numpy(), var_t.numpy() + 0.25  # any statistics: evaluation's running ones
    expected = F.batch_norm(t64(x), t64(stat_mean), t64(stat_var), None if gamma is None else t64(gamma),
                            None if beta is None else t64(beta), training=False, eps=eps)
    (y64,), (y32,) = both(dev, lambda *b: dev.batch_norm_apply(*b, batch, channels, spatial, eps),
                          x, stat_mean, stat_var, gamma, beta)
    near64(y64, expected)
    near32(y32, y64)

    for training in (True, False):
        if training:
            def fn(x_, g_=None, b_=None):
                return F.batch_norm(x_, None, None, g_, b_, training=True, eps=eps)
            use_mean, use_var = mean_t.numpy(), var_t.numpy()
        else:
            def fn(x_, g_=None, b_=None):
                return F.batch_norm(x_, t64(stat_mean), t64(stat_var), g_, b_, training=False, eps=eps)
            use_mean, use_var = stat_mean, stat_var
        _, refs = vjp(fn, [x, gamma, beta], go)
        grads64, grads32 = both(dev, lambda go_, x_, m_, v_, g_: dev.batch_norm_backward(
            go_, x_, m_, v_, g_, batch, channels, spatial, eps, training), go, x, use_mean, use_var, gamma)
        near64(grads64[0], refs[0], 1e-11)
        near32(grads32[0], grads64[0], 1e-3)
        if affine:
            near64(grads64[1], refs[1], 1e-11)
            near64(grads64[2], refs[2])


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_against_torch(dev, rng, vjp, affine):
    rows, cols, eps = 7, 13, 1e-5
    x = rng.standard_normal((rows, cols)) * 3.0 + 5.0
    x[2] = 4.0  # a constant row: variance 0, rstd = 1/sqrt(eps)
    gamma = rng.standard_normal(cols) if affine else None
    beta = rng.standard_normal(cols) if affine else None
    go = rng.standard_normal(x.shape)
    expected, refs = vjp(lambda x_, g_, b_: F.layer_norm(x_, (cols,), g_, b_, eps), [x, gamma, beta], go)
    (y64, stats64), (y32, stats32) = both(dev, lambda x_, g_, b_: dev.layer_norm(x_, g_, b_, rows, cols, eps),
                                          x, gamma, beta)
    near64(y64, expected)
    near32(y32, y64, 1e-3)
    var_t, mean_t = torch.var_mean(t64(x), dim=1, unbiased=False)
    near64(stats64.reshape(rows, 2)[:, 0], mean_t)
    near64(stats64.reshape(rows, 2)[:, 1], 1.0 / torch.sqrt(var_t + eps))
    near32(stats32, stats64, 1e-3)
    for want_affine in (True, False):
        grads64, grads32 = both(dev, lambda go_, x_, g_, st_: dev.layer_norm_backward(go_, x_, g_, st_, rows, cols,
                                                                                      want_affine),
                                go, x, gamma, stats64)
        near64(grads64[0], refs[0], 1e-11)
        near32(grads32[0], grads64[0], 1e-3)
        if want_affine:
            if affine:
                near64(grads64[1], refs[1])
                near64(grads64[2], refs[2])
        else:
            assert grads64[1:] == (None, None)
    with pytest.raises(ValueError, match="layer_norm_backward: stats has"):
        dev.layer_norm_backward(*(dev.upload(a, "f64") for a in (go, x)), None, dev.upload(np.zeros(3), "f64"),
                                rows, cols)


# ---------------------------------------------------------------------------- losses


def test_mse_loss_against_torch(dev, rng):
    pred, target = rng.standard_normal(37), rng.standard_normal(37)
    (l64,), (l32,) = both(dev, dev.mse_loss, pred, target)
    near64(l64, [F.mse_loss(t64(pred), t64(target)).item()])
    near32(l32, l64)
    pred[3] = np.inf
    assert dev.read(dev.mse_loss(dev.upload(pred, "f64"), dev.upload(target, "f64")))[0] == np.inf
    pred[4] = np.nan
    assert np.isnan(dev.read(dev.mse_loss(dev.upload(pred, "f64"), dev.upload(target, "f64")))[0])
    with pytest.raises(ValueError, match="mse_loss: pred and target are empty"):
        dev.mse_loss(dev.upload(np.zeros(0), "f64"), dev.upload(np.zeros(0), "f64"))
    with pytest.raises(ValueError, match="mse_loss: pred has 37"):
        dev.mse_loss(dev.upload(pred, "f64"), dev.upload(target[:5], "f64"))


@pytest.mark.parametrize("log_probs", [False, True])
def test_cross_entropy_against_torch(dev, rng, log_probs):
    rows, classes, ignore = 9, 5, 2
    logits = rng.standard_normal((rows, classes)) * 3.0
    target = rng.integers(0, classes, rows)
    target[[1, 6]] = ignore
    weight = rng.uniform(0.2, 2.0, classes)
    tgt = dev.upload(target.astype(np.int32))
    xt = t64(logits, True)
    log_p = xt if log_probs else F.log_softmax(xt, 1)
    nll_t = F.nll_loss(log_p, torch.tensor(target), t64(weight), ignore_index=ignore, reduction="none")
    smooth_t = -(log_p * t64(weight)).sum(1) * torch.tensor(target != ignore)
    grad_parts = rng.standard_normal(2 * rows)
    (t64(grad_parts[:rows]) * nll_t + t64(grad_parts[rows:]) * smooth_t).sum().backward()

    runs = both(dev, lambda x_, w_: dev.cross_entropy_rows(x_, tgt, w_, rows, classes, ignore, log_probs),
                logits, weight)
    (parts64, stats64, row_w64), (parts32, _, row_w32) = runs
    near64(parts64.reshape(2, rows)[0], nll_t.detach())
    near64(parts64.reshape(2, rows)[1], smooth_t.detach())
    near64(row_w64, np.where(target == ignore, 0.0, weight[target]))
    near32(parts32, parts64)
    near32(row_w32, row_w64)
    if not log_probs:   # the label-smoothed loss as nn.functional combines the parts
        smoothing = 0.15
        combined = parts64.reshape(2, rows)[0] * (1 - smoothing) + parts64.reshape(2, rows)[1] * smoothing / classes
        near64(combined, F.cross_entropy(t64(logits), torch.tensor(target), t64(weight), ignore_index=ignore,
                                         reduction="none", label_smoothing=smoothing))
    (g64,), (g32,) = both(dev, lambda gp_, x_, w_, st_: dev.cross_entropy_rows_backward(
        gp_, x_, tgt, w_, st_, rows, classes, ignore, log_probs), grad_parts, logits, weight, stats64)
    near64(g64, xt.grad)
    near32(g32, g64)

    xt.grad = None
    mean_t = F.nll_loss(log_p if log_probs else F.log_softmax(xt, 1), torch.tensor(target), t64(weight),
                        ignore_index=ignore)
    mean_t.backward(t64(1.7))
    (loss64, mstats64), (loss32, _) = both(dev, lambda x_, w_: dev.cross_entropy_mean(
        x_, tgt, w_, rows, classes, ignore, log_probs), logits, weight)
    near64(loss64, [mean_t.item()])
    near32(loss32, loss64)
    (gm64,), (gm32,) = both(dev, lambda gp_, x_, w_, st_: dev.cross_entropy_rows_backward(
        gp_, x_, tgt, w_, st_, rows, classes, ignore, log_probs, True), [1.7], logits, weight, mstats64)
    near64(gm64, xt.grad)
    near32(gm32, gm64)


def test_cross_entropy_edges(dev, rng):
    rows, classes = 4, 3
    logits = rng.standard_normal((rows, classes))
    logits[1, 2] = np.nan
    logits[2, 0] = -np.inf
    target = np.array([0, 1, 7, -100], np.int32)   # row 2: out of range -> NaN; row 3 ignored
    weight = np.ones(classes)
    tgt = dev.upload(target)
    parts, stats, row_w = (dev.read(b) for b in dev.cross_entropy_rows(dev.upload(logits, "f64"), tgt,
                                                                       dev.upload(weight, "f64"), rows, classes))
    nll = parts[:rows]
    near64(nll[0], F.cross_entropy(t64(logits[:1]), torch.tensor([0])))
    assert np.isnan(nll[1]) and np.isnan(nll[2]) and nll[3] == 0.0
    assert np.isnan(row_w[2]) and row_w[3] == 0.0
    grad = dev.read(dev.cross_entropy_rows_backward(dev.upload(np.ones(2 * rows), "f64"), dev.upload(logits, "f64"),
                                                    tgt, dev.upload(weight, "f64"), dev.upload(stats, "f64"),
                                                    rows, classes)).reshape(rows, classes)
    assert np.isnan(grad[1]).all() and (grad[2:] == 0).all()
    # An infinite upstream gradient gives 0, not inf * 0 = NaN, where the derivative is 0 (as torch's nll_loss).
    log_p = np.log(rng.uniform(0.1, 0.9, (2, classes)))
    xt = t64(log_p, True)
    F.nll_loss(xt, torch.tensor([1, 0]), reduction="none").backward(t64([np.inf, 1.0]))
    _, st, _ = dev.cross_entropy_rows(dev.upload(log_p, "f64"), dev.upload(np.array([1, 0], np.int32)),
                                      dev.upload(np.ones(classes), "f64"), 2, classes, log_probs=True)
    grad = dev.cross_entropy_rows_backward(dev.upload([np.inf, 1.0, 0.0, 0.0], "f64"), dev.upload(log_p, "f64"),
                                           dev.upload(np.array([1, 0], np.int32)), dev.upload(np.ones(classes), "f64"),
                                           st, 2, classes, log_probs=True)
    np.testing.assert_array_equal(dev.read(grad), xt.grad.numpy().reshape(-1))
    all_ignored = dev.upload(np.full(rows, -100, np.int32))
    loss, _ = dev.cross_entropy_mean(dev.upload(logits, "f64"), all_ignored, dev.upload(weight, "f64"), rows, classes)
    assert np.isnan(dev.read(loss)[0])   # 0 / 0, as torch
    with pytest.raises(ValueError, match="cross_entropy: target must hold int32"):
        dev.cross_entropy_rows(dev.upload(logits, "f64"), dev.upload(target.astype(np.float64), "f64"),
                               dev.upload(weight, "f64"), rows, classes)


# -------------------------------------------------------------------------- pooling

# (planes, in_h, in_w, kernel, stride, padding, dilation, ceil_mode)
MAX_CASES = [(5, 7, 9, (3, 2), 2, (1, 1), (1, 2), True), (3, 6, 6, 2, 2, 0, 1, False),
             (2, 8, 5, 3, 1, 1, 2, False), (4, 5, 7, 3, 3, 1, 1, True)]


@pytest.mark.parametrize("planes, in_h, in_w, kernel, stride, padding, dilation, ceil_mode", MAX_CASES)
def test_max_pool2d_against_torch(dev, rng, planes, in_h, in_w, kernel, stride, padding, dilation, ceil_mode):
    x = rng.standard_normal((planes, in_h, in_w))
    x[0, 1, 1] = np.nan
    x[1, 0, 0] = -np.inf
    xt = t64(x[None], True)
    out_t, index_t = F.max_pool2d(xt, kernel, stride, padding, dilation, ceil_mode, return_indices=True)
    go = rng.standard_normal(out_t.shape)
    out_t.backward(t64(go))
    out, indices, out_h, out_w = dev.max_pool2d(dev.upload(x, "f64"), planes, in_h, in_w, kernel, stride, padding,
                                                dilation, ceil_mode)
    assert isinstance(out, HostBuffer) and indices.dtype == "i32" and (out_h, out_w) == tuple(out_t.shape[2:])
    near64(dev.read(out), out_t.detach()[0])
    np.testing.assert_array_equal(dev.read(indices), index_t.numpy().reshape(-1))
    out32, indices32, _, _ = dev.max_pool2d(dev.upload(x.astype(np.float32)), planes, in_h, in_w, kernel, stride,
                                            padding, dilation, ceil_mode)
    near32(dev.read(out32), dev.read(out))
    np.testing.assert_array_equal(dev.read(indices32), dev.read(indices))
    (g64,), (g32,) = both(dev, lambda go_: dev.max_pool2d_backward(go_, indices, planes, in_h, in_w, out_h, out_w,
                                                                   kernel, stride, padding, dilation), go)
    near64(g64, xt.grad[0])
    near32(g32, g64)


# (planes, in_h, in_w, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_CASES = [(5, 7, 9, (3, 2), 2, 1, True, True, None), (3, 6, 7, 3, 2, 1, True, False, None),
             (2, 5, 5, 2, 1, 0, False, True, 3), (4, 9, 4, (3, 3), (2, 1), (1, 1), False, False, None)]


@pytest.mark.parametrize("planes, in_h, in_w, kernel, stride, padding, ceil_mode, count_include_pad, divisor",
                         AVG_CASES)
def test_avg_pool2d_against_torch(dev, rng, planes, in_h, in_w, kernel, stride, padding, ceil_mode,
                                  count_include_pad, divisor):
    x = rng.standard_normal((planes, in_h, in_w))
    x[1, 2, 3] = np.inf
    xt = t64(x[None], True)
    out_t = F.avg_pool2d(xt, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
    go = rng.standard_normal(out_t.shape)
    out_t.backward(t64(go))
    (y64, out_h, out_w), (y32, _, _) = both(dev, lambda x_: dev.avg_pool2d(x_, planes, in_h, in_w, kernel, stride,
                                                                           padding, ceil_mode, count_include_pad,
                                                                           divisor), x)
    assert (out_h, out_w) == tuple(out_t.shape[2:])
    near64(y64, out_t.detach()[0])
    near32(y32, y64)
    (g64,), (g32,) = both(dev, lambda go_: dev.avg_pool2d_backward(go_, planes, in_h, in_w, out_h, out_w, kernel,
                                                                   stride, padding, count_include_pad, divisor), go)
    near64(g64, xt.grad[0])
    near32(g32, g64)


def test_pool_checks(dev):
    x = dev.upload(np.zeros(2 * 3 * 3), "f64")
    with pytest.raises(ValueError, match="max_pool2d: input of size"):
        dev.max_pool2d(x, 2, 3, 3, 4, 1)
    with pytest.raises(ValueError, match="avg_pool2d: input has"):
        dev.avg_pool2d(x, 3, 3, 3, 2, 1)
    with pytest.raises(ValueError, match="max_pool2d_backward: indices has"):
        dev.max_pool2d_backward(dev.upload(np.zeros(8), "f64"), dev.upload(np.zeros(3, np.int32)), 2, 3, 3, 2, 2,
                                2, 1)


@pytest.mark.parametrize("batch, channels, in_h, in_w, scale_h, scale_w", [(2, 3, 4, 5, 2, 3), (1, 1, 1, 1, 1, 4)])
def test_upsample_against_torch(dev, rng, batch, channels, in_h, in_w, scale_h, scale_w):
    x = rng.standard_normal((batch, channels, in_h, in_w))
    xt = t64(x, True)
    out_t = F.interpolate(xt, scale_factor=(scale_h, scale_w), mode="nearest")
    go = rng.standard_normal(out_t.shape)
    out_t.backward(t64(go))
    shape = (batch, channels, in_h, in_w, scale_h, scale_w)
    (y64,), (y32,) = both(dev, lambda x_: dev.upsample_nearest2d(x_, *shape), x)
    near64(y64, out_t.detach())
    near32(y32, y64)
    (g64,), (g32,) = both(dev, lambda go_: dev.upsample_nearest2d_backward(go_, *shape), go)
    near64(g64, xt.grad)
    near32(g32, g64)


# ------------------------------------------------------------------------ optimizers
# Each case: the torch optimizer, and one anygpu step given (dev, param, grad, state dict of
# Buffers named as torch's state, the torch state after its step (for its step count and
# NAdam's float32 mu_product), hyper-parameters) computing the host scalars as anygpu.optim does.


def _sgd(dev, p, g, st, ts, h):
    dev.sgd_step(p, g, st.get("momentum_buffer"), lr=h["lr"], momentum=h.get("momentum", 0.0),
                 dampening=h.get("dampening", 0.0), weight_decay=h.get("weight_decay", 0.0),
                 nesterov=h.get("nesterov", False), first=ts["step"] == 1, maximize=h.get("maximize", False))


def _adam(dev, p, g, st, ts, h, decoupled=False):
    lr, (beta1, beta2), wd, t = h["lr"], h["betas"], h.get("weight_decay", 0.0), ts["step"]
    dev.adam_step(p, g, st["exp_avg"], st["exp_avg_sq"], st.get("max_exp_avg_sq"), step_size=lr / (1 - beta1 ** t),
                  beta1=beta1, beta2=beta2, eps=h["eps"], bias_correction2_sqrt=math.sqrt(1 - beta2 ** t),
                  weight_decay=0.0 if decoupled else wd, decay=1.0 - lr * wd if decoupled else 1.0,
                  maximize=h.get("maximize", False))


def _adamw(dev, p, g, st, ts, h):
    _adam(dev, p, g, st, ts, h, decoupled=True)


def _adadelta(dev, p, g, st, ts, h):
    dev.adadelta_step(p, g, st["square_avg"], st["acc_delta"], lr=h["lr"], rho=h["rho"], eps=h["eps"],
                      weight_decay=h["weight_decay"], maximize=h.get("maximize", False))


def _adagrad(dev, p, g, st, ts, h):
    dev.adagrad_step(p, g, st["sum"], clr=h["lr"] / (1 + (ts["step"] - 1) * h["lr_decay"]), eps=h["eps"],
                     weight_decay=h["weight_decay"], maximize=h.get("maximize", False))


def _rmsprop(dev, p, g, st, ts, h):
    dev.rmsprop_step(p, g, st["square_avg"], st.get("grad_avg"), st.get("momentum_buffer"), lr=h["lr"],
                     alpha=h["alpha"], eps=h["eps"], weight_decay=h["weight_decay"], momentum=h.get("momentum", 0.0),
                     maximize=h.get("maximize", False))


def _decay_args(h):
    wd, decoupled = h.get("weight_decay", 0.0), h.get("decoupled_weight_decay", False)
    return dict(weight_decay=0.0 if decoupled else wd, decay=1.0 - h["lr"] * wd if decoupled else 1.0)


def _nadam(dev, p, g, st, ts, h):
    lr, (beta1, beta2), t = h["lr"], h["betas"], ts["step"]
    mu = beta1 * (1.0 - 0.5 * 0.96 ** (t * h["momentum_decay"]))
    mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * h["momentum_decay"]))
    mu_product = ts["mu_product"]
    dev.nadam_step(p, g, st["exp_avg"], st["exp_avg_sq"], beta1=beta1, beta2=beta2, eps=h["eps"],
                   bias_correction2=1 - beta2 ** t, grad_coef=-lr * (1.0 - mu) / (1.0 - mu_product),
                   avg_coef=-lr * mu_next / (1.0 - mu_product * mu_next), maximize=h.get("maximize", False),
                   **_decay_args(h))


def _radam(dev, p, g, st, ts, h):
    (beta1, beta2), t = h["betas"], ts["step"]
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * t * beta2 ** t / (1 - beta2 ** t)
    rect = (math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            if rho_t > 5 else None)
    dev.radam_step(p, g, st["exp_avg"], st["exp_avg_sq"], lr=h["lr"], beta1=beta1, beta2=beta2, eps=h["eps"],
                   bias_correction1=1 - beta1 ** t, bias_correction2_sqrt=math.sqrt(1 - beta2 ** t), rect=rect,
                   maximize=h.get("maximize", False), **_decay_args(h))


def _adamax(dev, p, g, st, ts, h):
    (beta1, beta2), t = h["betas"], ts["step"]
    dev.adamax_step(p, g, st["exp_avg"], st["exp_inf"], clr=h["lr"] / (1 - beta1 ** t), beta1=beta1, beta2=beta2,
                    eps=h["eps"], weight_decay=h["weight_decay"], maximize=h.get("maximize", False))


def _rprop(dev, p, g, st, ts, h):
    dev.rprop_step(p, g, st["prev"], st["step_size"], etaminus=h["etas"][0], etaplus=h["etas"][1],
                   step_size_min=h["step_sizes"][0], step_size_max=h["step_sizes"][1],
                   maximize=h.get("maximize", False))


OPTIM_CASES = [
    ("SGD", _sgd, dict(lr=0.1)),
    ("SGD", _sgd, dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01, maximize=True)),
    ("SGD", _sgd, dict(lr=0.05, momentum=0.8, weight_decay=0.02, nesterov=True)),
    ("Adam", _adam, dict(lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.03)),
    ("Adam", _adam, dict(lr=0.02, betas=(0.9, 0.99), eps=1e-6, amsgrad=True, maximize=True)),
    ("AdamW", _adamw, dict(lr=0.01, betas=(0.85, 0.9), eps=1e-8, weight_decay=0.05, amsgrad=True)),
    ("Adadelta", _adadelta, dict(lr=0.9, rho=0.8, eps=1e-6, weight_decay=0.01)),
    ("Adagrad", _adagrad, dict(lr=0.1, lr_decay=0.05, eps=1e-10, weight_decay=0.02, initial_accumulator_value=0.3)),
    ("RMSprop", _rmsprop, dict(lr=0.01, alpha=0.9, eps=1e-8, weight_decay=0.01)),
    ("RMSprop", _rmsprop, dict(lr=0.01, alpha=0.7, eps=1e-8, weight_decay=0.0, momentum=0.5, centered=True,
                               maximize=True)),
    ("NAdam", _nadam, dict(lr=0.01, betas=(0.8, 0.95), eps=1e-8, weight_decay=0.02, momentum_decay=4e-3)),
    ("NAdam", _nadam, dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.02, momentum_decay=6e-3,
                           decoupled_weight_decay=True)),
    ("RAdam", _radam, dict(lr=0.01, betas=(0.9, 0.9), eps=1e-8, weight_decay=0.02)),
    ("RAdam", _radam, dict(lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.02, decoupled_weight_decay=True)),
    ("Adamax", _adamax, dict(lr=0.02, betas=(0.85, 0.95), eps=1e-8, weight_decay=0.01)),
    ("Rprop", _rprop, dict(lr=0.05, etas=(0.4, 1.3), step_sizes=(1e-3, 0.2), maximize=True)),
]

def _fresh_state(name, h, n, upload):
    """Our state Buffers, zero as torch's start (Adagrad's sum and Rprop's step_size as torch sets them)."""
    names = {"SGD": ["momentum_buffer"] if h.get("momentum") else [],
             "Adam": ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if h.get("amsgrad") else []),
             "Adadelta": ["square_avg", "acc_delta"], "Adagrad": ["sum"],
             "RMSprop": ["square_avg"] + (["grad_avg"] if h.get("centered") else [])
             + (["momentum_buffer"] if h.get("momentum") else []),
             "NAdam": ["exp_avg", "exp_avg_sq"], "RAdam": ["exp_avg", "exp_avg_sq"], "Adamax": ["exp_avg", "exp_inf"],
             "Rprop": ["prev", "step_size"]}[name.replace("AdamW", "Adam")]
    state = {k: upload(np.zeros(n)) for k in names}
    if name == "Adagrad":
        state["sum"] = upload(np.full(n, h["initial_accumulator_value"]))
    if name == "Rprop":
        state["step_size"] = upload(np.full(n, h["lr"]))
    return state


@pytest.mark.parametrize("name, step, hyper", OPTIM_CASES)
def test_optimizer_steps_against_torch(dev, rng, name, step, hyper):
    n, steps = 37, 8
    start = rng.standard_normal(n)
    grads = rng.standard_normal((steps, n))
    p_t = t64(start)
    opt = getattr(torch.optim, name)([p_t], foreach=False, **hyper)
    p = dev.upload(start, "f64")
    state = _fresh_state(name, hyper, n, lambda a: dev.upload(a, "f64"))
    for t in range(steps):
        p_t.grad = t64(grads[t])
        opt.step()
        torch_state = {"step": t + 1, **{k: v.item() for k, v in opt.state[p_t].items()
                                          if k in ("step", "mu_product")}}
        assert torch_state["step"] == t + 1
        step(dev, p, dev.upload(grads[t], "f64"), state, torch_state, hyper)
        assert isinstance(p, HostBuffer)
        near64(dev.read(p), p_t.detach())
        for key, buf in state.items():
            near64(dev.read(buf), opt.state[p_t][key])

    # Two steps on float32 Buffers against the same on HostBuffers (the same host scalars).
    runs = []
    for upload in (lambda a: dev.upload(a, "f64"), lambda a: dev.upload(np.asarray(a, np.float32))):
        p, state, mu_product = upload(start), _fresh_state(name, hyper, n, upload), 1.0
        for t in range(1, 3):
            mu = hyper["betas"][0] * (1.0 - 0.5 * 0.96 ** (t * hyper["momentum_decay"])) if name == "NAdam" else 1.0
            mu_product = float(np.float32(mu_product) * np.float32(mu))
            step(dev, p, upload(grads[t]), state, {"step": t, "mu_product": mu_product}, hyper)
        runs.append(dev.read(p))
    near32(runs[1], runs[0], 1e-4)


def test_optimizer_edges(dev, rng):
    empty = dev.upload(np.zeros(0), "f64")
    dev.adam_step(empty, empty, empty, empty, step_size=0.1, beta1=0.9, beta2=0.99, eps=1e-8,
                  bias_correction2_sqrt=0.1)   # nothing to update, as the GPU op
    p = dev.upload(rng.standard_normal(5), "f64")
    before = dev.read(p)
    dev.sgd_step(p, p, lr=0.5)   # grad is param itself: read before the update
    near64(dev.read(p), before * 0.5)
    with pytest.raises(ValueError, match="adam_step: exp_avg has 4 elements"):
        dev.adam_step(p, p, dev.upload(np.zeros(4), "f64"), dev.upload(np.zeros(5), "f64"), step_size=0.1,
                      beta1=0.9, beta2=0.99, eps=1e-8, bias_correction2_sqrt=0.1)
    grad = rng.standard_normal(5)
    grad[2] = np.nan
    state = [dev.upload(np.zeros(5), "f64") for _ in range(2)]
    dev.adam_step(p, dev.upload(grad, "f64"), *state, step_size=0.1, beta1=0.9, beta2=0.99, eps=1e-8,
                  bias_correction2_sqrt=0.1)
    assert np.isnan(dev.read(p)[2]) and np.isfinite(np.delete(dev.read(p), 2)).all()


def test_sgd_step_honours_found_inf_and_the_unset_marker(dev, rng):
    from anygpu.ops.optim import UNSET
    n = 6
    start, grad = rng.standard_normal(n), rng.standard_normal(n)
    hyper = dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.01)
    marker = np.full(n, UNSET, np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):   # the marker is a signalling NaN
        float64_marker = marker.astype(np.float64)
    for buf in (dev.upload(float64_marker, "f64"), dev.upload(marker)):   # float64 and float32 state
        p = dev.upload(start, "f64")
        before = dev.read(buf)
        dev.sgd_step(p, dev.upload(grad, "f64"), buf, found_inf=dev.upload(np.ones(1, np.uint32)), **hyper)
        np.testing.assert_array_equal(dev.read(p), start)   # skipped: nothing written
        assert dev.read(buf).tobytes() == before.tobytes()
        dev.sgd_step(p, dev.upload(grad, "f64"), buf, found_inf=dev.upload(np.zeros(1, np.uint32)), **hyper)
        p_t = t64(start)
        p_t.grad = t64(grad)
        torch.optim.SGD([p_t], foreach=False, **hyper).step()   # torch's first step: buf = the gradient
        near64(dev.read(p), p_t.detach(), 1e-12 if buf.dtype == "f64" else 1e-7)
    with pytest.raises(ValueError, match="sgd_step: found_inf must be one u32"):
        dev.sgd_step(p, p, lr=0.1, found_inf=dev.upload(np.zeros(2, np.uint32)))


def test_adam_multi_step_matches_adam_step(dev, rng):
    sizes = [5, 1, 9]
    hyper = dict(beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.01, decay=0.999, maximize=False)
    scalars = dict(step_sizes=[0.1, 0.2, 0.3], bias_correction2_sqrts=[0.1, 0.15, 0.2])
    arrays = [[rng.standard_normal(n) for _ in range(5)] for n in sizes]
    for amsgrad in (False, True):
        multi = [[dev.upload(a, "f64") for a in group] for group in arrays]
        multi[1] = [dev.upload(a.astype(np.float32)) for a in arrays[1]]   # one float32 parameter among them
        single = [[dev.upload(a, "f64") for a in group] for group in arrays]
        dev.adam_multi_step(*([m[j] for m in multi] for j in range(4)),
                            [m[4] for m in multi] if amsgrad else None, **scalars, **hyper)
        for i, group in enumerate(single):
            dev.adam_step(*group[:4], group[4] if amsgrad else None, step_size=scalars["step_sizes"][i],
                          bias_correction2_sqrt=scalars["bias_correction2_sqrts"][i], **hyper)
            for got, want in zip(multi[i], single[i]):
                (near32 if i == 1 else near64)(dev.read(got), dev.read(want))
    with pytest.raises(ValueError, match="adam_multi_step: grads has 2 entries"):
        dev.adam_multi_step([b[0] for b in single], [b[1] for b in single][:2],
                            [b[2] for b in single], [b[3] for b in single], **scalars, **hyper)


# ------------------------------------------------------------------------ GradScaler


@pytest.mark.parametrize("bad", [None, "nan", "inf"])
def test_unscale_check_with_float64_gradients(dev, rng, bad):
    a, b, c = rng.standard_normal(7) * 1e3, rng.standard_normal(300), rng.standard_normal(5).astype(np.float32)
    if bad:
        b[11] = float(bad)
    grads = [dev.upload(a, "f64"), dev.upload(b, "f64"), dev.upload(c)]
    flag = dev.unscale_check(grads, 1.0 / 512.0)
    assert flag.dtype == "u32" and not isinstance(flag, HostBuffer)
    np.testing.assert_array_equal(dev.read(grads[0]), a / 512.0)
    np.testing.assert_array_equal(dev.read(grads[1]), b / 512.0)
    np.testing.assert_array_equal(dev.read(grads[2]), c * np.float32(1.0 / 512.0))
    assert bool(dev.read(flag)[0]) == (bad is not None)
    with pytest.raises(ValueError, match="unscale_check: gradient 1 must be f32 or f64"):
        dev.unscale_check([grads[0], dev.upload(np.zeros(2, np.int32))], 0.5)


def test_unscale_check_with_the_scale_on_the_gpu(dev, rng):
    """inverse = the float32 reciprocal of the scale (torch: scale.double().reciprocal().float())."""
    scale = 3.0 * 2.0 ** 10   # 1/scale is not a float32: the rounding shows
    a = rng.standard_normal(9)
    grads = [dev.upload(a, "f64")]
    flag = dev.unscale_check(grads, scale=dev.upload(np.array([scale], np.float32)))
    found, inv = torch.zeros(1), torch.tensor([scale], dtype=torch.float32).double().reciprocal().float()
    grads_t = [t64(a)]
    torch._amp_foreach_non_finite_check_and_unscale_(grads_t, found, inv)
    np.testing.assert_array_equal(dev.read(grads[0]), grads_t[0].numpy())
    assert not dev.read(flag)[0] and not found.item()
    with pytest.raises(ValueError, match="unscale_check: give exactly one of inverse"):
        dev.unscale_check(grads, 0.5, scale=dev.upload(np.array([scale], np.float32)))
