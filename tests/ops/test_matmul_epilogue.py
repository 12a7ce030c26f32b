"""Elementwise epilogues of products (ops/fusion.py `defer_product`, matmul_gen.Epilogue): a
float product is deferred, and the elementwise ops that read it before other work comes are
folded into its store; a linear layer's bias is added there too. The results equal the
op-by-op path (`dev.fuse = False`) bit for bit and torch CPU within float32 rounding, forward
and backward; an MLP training step takes fewer dispatches."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn
from anygpu.nn import functional as F
from test_fusion import _assert_same_bits as _same_bits  # bits, NaN's sign aside
from test_fusion import _Fuse


# (rows, in, out): odd sizes (the simple kernel and scalar stores), multiples of 4 (vec4
# stores of the tuned family on bigger shapes), one over the 64-wide simple tile.
SHAPES = [(7, 5, 3), (37, 29, 13), (64, 48, 36), (133, 70, 65), (256, 96, 128)]


@pytest.mark.parametrize("rows,in_f,out_f", SHAPES)
def test_linear_relu_forward_and_gradients_match_torch_and_op_by_op(dev, rows, in_f, out_f):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, in_f)).astype(np.float32)
    w = (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)
    b = rng.standard_normal(out_f).astype(np.float32)
    g = rng.standard_normal((rows, out_f)).astype(np.float32)
    results = {}
    for fuse in (True, False):
        with _Fuse(dev, fuse):
            first = dict(dev.stats)
            xs, ws, bs = (ag.tensor(v, requires_grad=True) for v in (x, w, b))
            y = F.relu(F.linear(xs, ws, bs))
            pre = F.linear(xs, ws, bs)  # an output nobody activates: the bias alone
            y.backward(ag.tensor(g))
            results[fuse] = [y.detach().numpy(), pre.detach().numpy(), xs.grad.numpy(), ws.grad.numpy(),
                             bs.grad.numpy()]
            if fuse:
                assert dev.stats["fused_kernels"] > first["fused_kernels"]
    for got, plain, name in zip(results[True], results[False], ("y", "pre", "dx", "dw", "db")):
        _same_bits(got, plain, name)
    with _Fuse(dev, False):  # the bias added in the store: as the separate kernel adds it
        product = dev.matmul_strided(dev.upload(x), dev.upload(w), 1, rows, out_f, in_f, trans_b=True)
        _same_bits(results[True][1].ravel(), dev.read(dev.add_per_col(product, dev.upload(b), rows, out_f)))
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ty = torch.relu(torch.nn.functional.linear(tx, tw, tb))
    ty.backward(torch.tensor(g))
    tol = dict(rtol=1e-5, atol=1e-5 * np.sqrt(in_f))
    np.testing.assert_allclose(results[True][0], ty.detach().numpy(), **tol)
    np.testing.assert_allclose(results[True][1], torch.nn.functional.linear(tx, tw, tb).detach().numpy(), **tol)
    for got, want in zip(results[True][2:], (tx.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4 * np.sqrt(rows))


def test_mlp_step_takes_fewer_dispatches_and_trains_bit_for_bit_as_op_by_op(dev):
    def build():
        model = nn.Sequential(nn.Linear(23, 33), nn.ReLU(), nn.Linear(33, 17), nn.ReLU(), nn.Linear(17, 5))
        return model, ag.optim.SGD(model.parameters(), lr=0.1)
    fused, plain = train_fused_and_op_by_op(dev, build, (19, 23), 5)
    # Op by op the biases are in the products' stores already; fused, the 2 ReLUs join them
    # forward and the 2 ReLU backwards join the stores of the gradient products.
    assert fused <= plain - 4, (fused, plain)


def train_fused_and_op_by_op(dev, build, x_shape: tuple, classes: int, steps: int = 3) -> tuple[int, int]:
    """Train the (model, optimizer) that `build()` returns for `steps` steps on fixed random
    inputs of x_shape and labels below `classes`, fusing and op by op; checks that losses
    and final weights agree bit for bit and returns the dispatches of the last step of each."""
    results = {}
    for fuse in (True, False):
        ag.manual_seed(0)
        rng = np.random.default_rng(0)
        with _Fuse(dev, fuse):
            model, opt = build()
            x = ag.tensor(rng.standard_normal(x_shape).astype(np.float32))
            labels = ag.tensor(rng.integers(0, classes, x_shape[0]).astype(np.int32), dtype="int32")
            losses = []
            for _ in range(steps):
                dev.synchronize()
                before = dev.stats["dispatches"]
                opt.zero_grad()
                loss = F.cross_entropy(model(x), labels)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                dispatches = dev.stats["dispatches"] - before
            results[fuse] = (losses, [p.detach().numpy() for p in model.parameters()], dispatches)
    assert results[True][0] == results[False][0]
    for got, want in zip(results[True][1], results[False][1]):
        np.testing.assert_array_equal(got, want)
    return results[True][2], results[False][2]


def _chain(dev, a, b, other, shape):
    """A product and elementwise work on it, with a held intermediate and a value read later."""
    m, n, k = shape
    p = dev.matmul_strided(a, b, 1, m, n, k, trans_b=True)
    held = dev.unary("scale", p, 0.5)
    t = dev.unary("clamp", dev.binary("mul", other, held), -3.0, 2.5)  # product as b, scalars
    t = dev.binary("relu_backward", dev.unary("tanh", t), other)  # as a, an extra input
    late = dev.unary("exp", held)  # reads a held value of the chain after it ended
    return [held, t, late, dev.unary("gelu", dev.unary("sigmoid", dev.matmul_strided(a, b, 1, m, n, k, trans_b=True)))]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("shape", [(5, 7, 9), (33, 64, 17), (128, 132, 96)])
def test_epilogue_chains_match_op_by_op_bit_for_bit(dev, dtype, shape):
    if dtype == "f16" and not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")
    m, n, k = shape
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32)
    other = rng.standard_normal((m, n)).astype(np.float32)
    a[0, :3] = [np.nan, np.inf, -np.inf]
    other.flat[::7] = np.resize(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32), other.flat[::7].size)
    bufs = {}
    for fuse in (True, False):
        with _Fuse(dev, fuse):
            first = dict(dev.stats)
            ins = [dev.upload(v, dtype) for v in (a, b, other)]
            values = _chain(dev, *ins, shape)
            bufs[fuse] = [dev.read(v) for v in values]
            if fuse:
                assert dev.stats["fused_kernels"] - first["fused_kernels"] >= 2
    for i, (got, plain) in enumerate(zip(bufs[True], bufs[False])):
        assert got.dtype == (np.float16 if dtype == "f16" else np.float32)
        _same_bits(got, plain, f"value {i}")
    if dtype == "f32":  # torch CPU, float64 products rounded to float32
        p = torch.from_numpy(a).double() @ torch.from_numpy(b).double().T
        held = (p * 0.5).float()
        np.testing.assert_allclose(bufs[True][0], held.numpy().ravel(), rtol=1e-5, atol=1e-5 * np.sqrt(k))
        np.testing.assert_allclose(bufs[True][3], torch.nn.functional.gelu(torch.sigmoid(p.float())).numpy().ravel(), rtol=1e-5, atol=1e-5)


def test_a_chain_past_the_binding_limit_ends_and_the_rest_still_runs(dev):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((9, 6)).astype(np.float32), rng.standard_normal((6, 11)).astype(np.float32)
    addends = [rng.standard_normal(99).astype(np.float32) for _ in range(12)]
    results = {}
    for fuse in (True, False):
        with _Fuse(dev, fuse):
            t = dev.matmul(dev.upload(a), dev.upload(b), 9, 11, 6)
            for x in addends:
                t = dev.add(t, dev.upload(x))  # each a new extra input of the epilogue
            results[fuse] = dev.read(t)
    _same_bits(results[True], results[False])
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(results[True], want.ravel() + sum(x.astype(np.float64) for x in addends),
                               rtol=1e-5, atol=1e-5)


def test_products_nobody_reads_still_run_and_reads_realize_them(dev, rng):
    a = dev.upload(rng.standard_normal(12).astype(np.float32))
    dev.synchronize()
    first = dev.stats["dispatches"]
    for _ in range(3):
        dev.matmul(a, a, 3, 3, 4)  # dropped at once: still one kernel each
    dev.synchronize()
    assert dev.stats["dispatches"] - first == 3
    p = dev.matmul(a, a, 3, 3, 4)
    assert p._lazy is not None  # pending until something needs it
    data = dev.read(a).reshape(3, 4)
    np.testing.assert_allclose(dev.read(p).reshape(3, 3), data @ data.reshape(4, 3), rtol=1e-5)


def test_bias_errors_name_the_op(dev):
    a, b = dev.upload(np.ones(6, np.float32)), dev.upload(np.ones(9, np.float32))
    with pytest.raises(ValueError, match="linear: bias"):
        dev.matmul_strided(a, b, 1, 2, 3, 3, bias=dev.upload(np.ones(4, np.float32)), op="linear")
    with pytest.raises(ValueError, match="matmul: bias must be of the operands' float dtype"):
        dev.matmul_strided(a, b, 1, 2, 3, 3, bias=dev.upload(np.ones(3, np.int32)))
