"""float16 tensors (f16 Buffers, f32 math inside the kernels) and float16 autocast with a
GradScaler, against torch on the CPU in float16 and float32."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu.ops import gpu

pytestmark = pytest.mark.skipif(not gpu().supports("f16"), reason="adapter lacks shader-f16")


def _close(ours, theirs, rtol=2e-3, atol=2e-3):
    ours = ours.detach().numpy() if isinstance(ours, ag.Tensor) else ours
    theirs = theirs.detach().float().numpy()
    np.testing.assert_allclose(np.asarray(ours, np.float32), theirs, rtol=rtol, atol=atol)


def _pair(data, requires_grad=True):
    return (ag.tensor(data, dtype=ag.float16, requires_grad=requires_grad),
            torch.tensor(data, dtype=torch.float16, requires_grad=requires_grad))


def test_creation_conversion_and_round_trip():
    data = np.array([70000.0, 65519.0, 65520.0, -1e6, 1e-8, 3.14159, np.nan, -np.inf], np.float32)
    ours, theirs = ag.tensor(data).half(), torch.tensor(data).half()
    assert ours.dtype is ag.float16 and ours.numpy().dtype == np.float16
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())  # rounding, overflow to inf, NaN
    np.testing.assert_array_equal(ag.tensor(data, dtype=ag.half).numpy(), theirs.numpy())
    assert ours.float().dtype is ag.float32 and ours.to(ag.float32).dtype is ag.float32
    assert ag.tensor(data).to(ag.float16).element_size() == 2
    assert ag.tensor(np.ones(3, np.float16)).dtype is ag.float16  # as torch.from_numpy
    assert ag.ones(2, 3, dtype=ag.float16).dtype is ag.float16
    assert ag.zeros(5, dtype="float16").numpy().dtype == np.float16
    assert ag.full((2,), 1e5, dtype=ag.float16).numpy().tolist() == [np.inf, np.inf]
    assert ag.tensor([1, 2]).half().tolist() == [1.0, 2.0]
    assert ag.tensor([1.5, -2.5]).half().long().tolist() == [1, -2]
    assert repr(ag.ones(2).half()) == repr(torch.ones(2).half())
    assert ours.type() == theirs.type() == "torch.HalfTensor" and ag.ones(2).type("torch.HalfTensor").dtype is ag.half
    assert ag.randn(3, dtype=ag.half).dtype is ag.float16 and ag.rand(2, dtype=ag.float16).dtype is ag.float16
    assert ag.rand_like(ours).dtype is ag.float16 and ag.randn_like(ours, dtype=ag.float32).dtype is ag.float32
    with pytest.raises(ValueError, match="float32"):  # optimizers keep float32 (master) parameters
        ag.optim.SGD([ag.nn.Parameter(ours)], lr=0.1)
    for dtype in (ag.bfloat16,):  # (float64 lives on the host: tests/tensor/test_float64.py)
        with pytest.raises(ValueError, match="not available"):
            ag.zeros(2, dtype=dtype)


@pytest.mark.parametrize("op", ["exp", "relu", "sigmoid", "tanh", "silu", "gelu", "abs", "neg", "square",
                                "affine", "div", "pow2", "add_self", "clamp"])
def test_elementwise_forward_and_gradients(rng, op):
    data = (rng.standard_normal((7, 13)) * 2).astype(np.float32)
    fns = {"affine": lambda z: z * 2.5 - 1.0, "div": lambda z: z / 3.0, "pow2": lambda z: z ** 2,
           "add_self": lambda z: z + z * z, "clamp": lambda z: z.clamp(-1.0, 0.5),
           "silu": lambda z: torch_or_ag(z).nn.functional.silu(z), "gelu": lambda z: torch_or_ag(z).nn.functional.gelu(z)}
    fn = fns.get(op, lambda z: getattr(z, op)())
    (a, t) = _pair(data)
    out_a, out_t = fn(a), fn(t)
    assert out_a.dtype is ag.float16 and out_t.dtype is torch.float16
    _close(out_a, out_t)
    grad = rng.standard_normal(out_t.shape).astype(np.float32)
    out_a.backward(ag.tensor(grad).half())
    out_t.backward(torch.tensor(grad).half())
    assert a.grad.dtype is ag.float16
    _close(a.grad, t.grad, rtol=4e-3, atol=4e-3)


@pytest.mark.parametrize("shape", [(5, 7, 9), (33, 17, 65)])
def test_matmul_linear_and_gradients(rng, shape):
    m, k, n = shape
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (n, k), (n,)))
    ours = [ag.tensor(v, dtype=ag.float16, requires_grad=True) for v in (x, w, b)]
    theirs = [torch.tensor(v, dtype=torch.float16, requires_grad=True) for v in (x, w, b)]
    for lib, (xi, wi, bi) in ((ag, ours), (torch, theirs)):
        y = lib.nn.functional.linear(xi, wi, bi)
        assert str(y.dtype) == "torch.float16"
        (y.float() ** 2).sum().backward()
        z = xi @ wi.T
        assert str(z.dtype) == "torch.float16"
        lib._y, lib._z = y, z
    tol = 4e-3 * np.sqrt(k)
    _close(ag._y, torch._y, rtol=4e-3, atol=tol)
    _close(ag._z, torch._z, rtol=4e-3, atol=tol)
    for o, t in zip(ours, theirs):
        assert o.grad.dtype is ag.float16
        _close(o.grad, t.grad, rtol=1e-2, atol=tol * 4 * np.sqrt(m))
    with pytest.raises(ValueError, match="matmul.*same dtype"):
        ag.tensor(x).half() @ ag.tensor(x).T


def test_softmax_log_softmax_layer_norm_sum_mean(rng):
    data = (rng.standard_normal((6, 37)) * 3).astype(np.float32)
    for name, fn in (("softmax", lambda z: z.softmax(-1)), ("log_softmax", lambda z: z.log_softmax(1)),
                     ("layer_norm", lambda z: torch_or_ag(z).nn.functional.layer_norm(z, (37,))),
                     ("sum", lambda z: z.sum(1)), ("mean", lambda z: z.mean()), ("logsumexp", lambda z: z.logsumexp(0))):
        a, t = _pair(data)
        out_a, out_t = fn(a), fn(t)
        assert out_a.dtype is ag.float16, name
        _close(out_a, out_t, rtol=4e-3, atol=2e-2)
        out_a.float().sum().backward()
        out_t.float().sum().backward()
        assert a.grad.dtype is ag.float16, name
        _close(a.grad, t.grad, rtol=1e-2, atol=2e-2)


def torch_or_ag(z):
    return ag if isinstance(z, ag.Tensor) else torch


def test_nan_inf_and_overflow():
    data = np.array([np.nan, np.inf, -np.inf, 60000.0, -60000.0, 1.0], np.float32)
    a, t = _pair(data, requires_grad=False)
    for fn in (lambda z: z * 2.0, lambda z: z + z, lambda z: z.exp(), lambda z: z.relu(), lambda z: z.sum(),
               lambda z: z.softmax(0)):
        np.testing.assert_array_equal(fn(a).numpy(), fn(t).numpy())


def _native_chain(lib, x, b, c):
    """float16 elementwise ops of every kind: broadcasting, Python scalars on either side,
    maximum (NaN through it), activations, clamp, pow, a comparison: 25 ops."""
    F = lib.nn.functional
    y = x * 2.0 + b                       # 60000 * 2 and 40000 * 2 overflow past 65504 to inf
    y = (y - c) / c + 0.5                 # broadcast sub and div, scalar add
    z = lib.maximum(y, x * 0.25) - 1.5
    w = F.silu(z) * b + z.sigmoid() * z.tanh() - (z * 0.125).exp()
    w = 3.0 - w.clamp(-40000.0, 20000.0) * F.leaky_relu(z, 0.1) + w.abs() ** 2
    return w, z, w > z


def _native_chain_inputs(rng):
    x = (rng.standard_normal((5, 7, 9)) * 3).astype(np.float32)
    x[0, 0, :8] = [np.nan, np.inf, -np.inf, 60000.0, -60000.0, 65504.0, 40000.0, -1e-3]
    b = rng.standard_normal((7, 1)).astype(np.float32)
    c = (rng.uniform(1.0, 3.0, 9) * rng.choice([-1, 1], 9)).astype(np.float32)
    return x, b, c


def test_native_chain_with_broadcasting_scalars_nan_inf_overflow_matches_torch(rng):
    data = _native_chain_inputs(rng)
    ours = [ag.tensor(v, dtype=ag.float16, requires_grad=True) for v in data]
    theirs = [torch.tensor(v, dtype=torch.float16, requires_grad=True) for v in data]
    (w_a, z_a, mask_a), (w_t, _, _) = _native_chain(ag, *ours), _native_chain(torch, *theirs)
    assert w_a.dtype is ag.float16 and mask_a.dtype is ag.bool
    got, want = w_a.detach().numpy(), w_t.detach().numpy()
    assert np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])  # same infinities
    _close(w_a, w_t)
    np.testing.assert_array_equal(mask_a.numpy(), got > z_a.detach().numpy())  # f16 compared as stored
    grad = rng.standard_normal(w_t.shape).astype(np.float16)
    w_a.backward(ag.tensor(grad))
    w_t.backward(torch.tensor(grad))
    for o, t in zip(ours, theirs):
        assert o.grad.dtype is ag.float16
        g_a, g_t = o.grad.numpy().astype(np.float32), t.grad.numpy().astype(np.float32)
        np.testing.assert_array_equal(np.isnan(g_a), np.isnan(g_t))
        finite = np.isfinite(g_t)
        np.testing.assert_allclose(g_a[finite], g_t[finite], rtol=4e-3, atol=4e-3 * np.abs(g_t[finite]).max())


def test_native_ops_stay_in_f16(rng, monkeypatch):
    """float16 elementwise ops read and write f16 Buffers (fused, or one dispatch per op), and no
    conversion to f32 forward or backward (the mixed float16/float32 case still converts)."""
    dev = gpu()
    ours = [ag.tensor(v, dtype=ag.float16, requires_grad=True) for v in _native_chain_inputs(rng)]
    casts = []
    real_cast = type(dev).cast

    def spy(self, buf, dtype):
        casts.append((buf.dtype, dtype))
        return real_cast(self, buf, dtype)

    monkeypatch.setattr(type(dev), "cast", spy)
    start, fused = dev.stats["dispatches"], dev.stats["fused_ops"]
    w, _, mask = _native_chain(ag, *ours)
    mask.numpy()
    dispatches = dev.stats["dispatches"] - start
    if dev.fuse:  # the chain's 25 ops, fused into fewer f16 kernels (ops/fusion.py)
        assert dispatches < 25 and dev.stats["fused_ops"] > fused
    else:
        assert dispatches == 25  # one kernel each
    assert w._buf.dtype == "f16" and not casts
    grad = ag.ones(*w.shape, dtype=ag.float16)
    casts.clear()
    w.backward(grad)
    assert all(t.grad._buf.dtype == "f16" for t in ours)
    assert ("f16", "f32") not in casts and ("f32", "f16") not in casts, casts
    (ours[0] + ag.ones(7, 9)).sum().backward()  # mixed: float32 result, x converted
    assert ("f16", "f32") in casts


def test_mixed_dtypes_promote_as_torch(rng):
    data = rng.standard_normal((3, 4)).astype(np.float32)
    a16, a32 = ag.tensor(data).half(), ag.tensor(data)
    assert (a16 + a32).dtype is ag.float32 and (a16 * 2.0).dtype is ag.float16
    assert (a16 + ag.tensor(1.0)).dtype is ag.float16  # a 0-d float32 tensor does not widen
    assert (a16 > 0).dtype is ag.bool and a16.argmax().dtype is ag.int64


# torch's documented CUDA autocast lists (torch CPU autocast keeps softmax/layer_norm in float16).
AUTOCAST_DTYPES = {
    "matmul": "float16", "linear": "float16", "conv2d": "float16", "relu": "float16", "add": "float16",
    "softmax": "float32", "log_softmax": "float32", "layer_norm": "float32", "mse_loss": "float32",
    "cross_entropy": "float32", "sum": "float32", "exp": "float32",
}


def test_autocast_output_dtypes_follow_torch_cuda_lists(rng):
    F = ag.nn.functional
    x = ag.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    w = ag.tensor(rng.standard_normal((5, 6)).astype(np.float32), requires_grad=True)
    image = ag.tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    kernel = ag.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    with ag.autocast("cuda", dtype=ag.float16):
        y = F.linear(x, w)
        got = {"matmul": (x @ w.T).dtype, "linear": y.dtype, "conv2d": F.conv2d(image, kernel).dtype,
               "relu": y.relu().dtype, "add": (y + y).dtype, "softmax": y.softmax(-1).dtype,
               "log_softmax": F.log_softmax(y, -1).dtype, "layer_norm": F.layer_norm(y, (5,)).dtype,
               "mse_loss": F.mse_loss(y, ag.zeros(4, 5)).dtype,
               "cross_entropy": F.cross_entropy(y, ag.tensor([0, 1, 2, 3])).dtype, "sum": y.sum().dtype,
               "exp": y.exp().dtype}
        loss = F.mse_loss(y, ag.zeros(4, 5))
    assert {k: str(v).removeprefix("torch.") for k, v in got.items()} == AUTOCAST_DTYPES
    assert x.matmul(w.T).dtype is ag.float32  # outside the region: float32 again
    loss.backward()
    assert w.grad.dtype is ag.float32  # master weights get float32 gradients through the casts
    with torch.autocast("cpu", dtype=torch.float16):  # torch CPU agrees on the matmul-type ops
        tx, tw = torch.tensor(x.numpy()), torch.tensor(w.detach().numpy())
        assert torch.nn.functional.linear(tx, tw).dtype == torch.float16 and (tx @ tw.T).dtype == torch.float16
    with ag.autocast("cuda", enabled=False):
        assert (x @ w.T).dtype is ag.float32


def _scaler_run(lib, grads_inf_at, steps=7):
    """A scaler over a one-parameter model whose gradient is inf at chosen steps: the scales."""
    p = lib.nn.Parameter(lib.tensor([1.0, 2.0]))
    opt = lib.optim.SGD([p], lr=0.1)
    scaler = lib.amp.GradScaler("cuda" if lib is ag else "cpu", init_scale=8.0, growth_interval=2)
    scales, values = [], []
    for step in range(steps):
        opt.zero_grad()
        loss = (p * (float("inf") if step in grads_inf_at else 1.0)).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        values.append(p.detach().numpy().tolist())
    return scales, values, scaler.state_dict()


def test_grad_scaler_skips_inf_steps_and_scales_as_torch():
    ours = _scaler_run(ag, {1, 4})
    theirs = _scaler_run(torch, {1, 4})
    assert ours[0] == theirs[0]  # the scale sequence
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6)  # skipped steps leave p unchanged
    assert ours[2] == theirs[2]
    scaler = ag.amp.GradScaler()
    assert scaler.get_scale() == 65536.0 and scaler.is_enabled()
    scaler.load_state_dict(theirs[2])
    assert scaler.state_dict() == theirs[2]


def test_mixed_precision_training_tracks_float32(rng):
    x = rng.standard_normal((32, 10)).astype(np.float32)
    y = rng.standard_normal((32, 1)).astype(np.float32)

    def train(amp):
        ag.manual_seed(0)
        model = ag.nn.Sequential(ag.nn.Linear(10, 17), ag.nn.ReLU(), ag.nn.Linear(17, 1))
        opt = ag.optim.SGD(model.parameters(), lr=0.05)
        scaler = ag.amp.GradScaler(enabled=amp)
        losses = []
        for _ in range(6):
            opt.zero_grad()
            with ag.autocast("cuda", dtype=ag.float16, enabled=amp):
                loss = ag.nn.functional.mse_loss(model(ag.tensor(x)), ag.tensor(y))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
        assert all(p.dtype is ag.float32 for p in model.parameters())
        return losses

    mixed, full = train(True), train(False)
    np.testing.assert_allclose(mixed, full, rtol=1e-2)
    assert mixed[-1] < mixed[0]


def test_module_dtype_conversion_like_torch():
    """Module.half/float/to(dtype) convert floating parameters and buffers in place (the
    Parameter objects stay); integer buffers stay; float64/bfloat16/int dtypes are refused."""
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.BatchNorm1d(3)).eval()
    ours = ag.nn.Sequential(ag.nn.Linear(5, 3), ag.nn.BatchNorm1d(3)).eval()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    weight = ours[0].weight
    ours.half(), theirs.half()
    assert ours[0].weight is weight
    assert {k: str(v.dtype) for k, v in ours.state_dict().items()} == \
        {k: str(v.dtype).replace("int64", "int32") for k, v in theirs.state_dict().items()}
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float16)
    got = ours(ag.tensor(x))
    assert got.dtype is ag.float16
    _close(got, theirs(torch.tensor(x)), rtol=5e-3, atol=5e-3)
    assert ours.float()[0].weight.dtype is ag.float32 and ours.to(ag.float16)[1].bias.dtype is ag.float16
    assert ours.to("cpu", ag.float32)[0].bias.dtype is ag.float32
    assert ours.double()[0].weight.dtype is ag.float64 and ours.float()[0].weight.dtype is ag.float32
    for convert in (ours.bfloat16, lambda: ours.to(ag.int32)):
        with pytest.raises(ValueError, match="Module"):
            convert()


@pytest.mark.parametrize("half_base", [True, False])
def test_strided_view_conversions_and_gradients(rng, half_base):
    """A strided view (a split piece, viewed into heads and transposed: autocast's q, k, v)
    converted between float16 and float32 (one gather that converts), forward exact and the
    gradient back in the base's dtype, as torch."""
    data = (rng.standard_normal((3, 5, 21)) * 300).astype(np.float16 if half_base else np.float32)
    data.flat[7] = np.nan
    data.flat[11] = 7e4 if not half_base else np.inf   # overflows to inf in float16
    ours, theirs = (ag.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True))
    target_ag, target_torch = (ag.float32, torch.float32) if half_base else (ag.float16, torch.float16)
    outs = []
    for lib, x, target in ((ag, ours, target_ag), (torch, theirs, target_torch)):
        q, k, v = x.split(7, dim=2)
        heads = [t.view(3, 5, 1, 7).transpose(1, 2) for t in (q, k, v)]   # (3, 1, 5, 7)
        converted = [h.to(target) for h in heads]
        assert all(c.dtype is target for c in converted)
        weights = lib.tensor(np.arange(3 * 5 * 7, dtype=np.float32).reshape(3, 1, 5, 7) % 5 - 2).to(target)
        loss = sum(((c * weights) * (i + 1)).float().sum() for i, c in enumerate(converted[:2]))
        loss.backward()
        outs.append(([c.detach().float().numpy() for c in converted], x.grad.float().numpy()))
    for got, want in zip(outs[0][0], outs[1][0]):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
