"""float64 tensors (held and computed on the host in numpy: runtime/host.py, ops/host64)
against torch float64 on the CPU at 1e-12: values and gradients of elementwise ops,
reductions, products, convolutions, LSTM cells, losses and optimizers; dtype inference,
promotion and conversions as torch's."""

import numpy as np
import pytest
import torch

import anygpu as ag
import anygpu.nn as agnn
import anygpu.nn.functional as agF

RTOL = 1e-12


def close(ours, theirs, rtol=RTOL, atol=1e-13):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    ours = ours.numpy() if isinstance(ours, ag.Tensor) else np.asarray(ours)
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)


def pair(arr, grad=True):
    """The same float64 data as an anygpu and a torch tensor (both requiring grad)."""
    a = ag.tensor(arr, dtype=ag.float64, requires_grad=grad)
    t = torch.tensor(arr, dtype=torch.float64, requires_grad=grad)
    return a, t


rng = np.random.default_rng(64)


def test_dtype_inference_and_conversions():
    assert ag.tensor(np.array([1.0, 2.0])).dtype is ag.float64  # float64 NumPy data: float64, as torch
    assert ag.from_numpy(np.zeros(3)).dtype is ag.float64
    assert ag.tensor([1.0, 2.0]).dtype is ag.float32  # Python floats: the default dtype
    assert ag.tensor(np.array([1.0], np.float32)).dtype is ag.float32
    x = ag.tensor([1.5, -2.25]).double()
    assert x.dtype is ag.float64 and x.float().dtype is ag.float32
    assert x.to(ag.int64).tolist() == [1, -2]
    assert ag.tensor([1, 2]).double().dtype is ag.float64
    assert ag.zeros(2, 3, dtype=ag.double).numpy().dtype == np.float64
    assert ag.randn(4, dtype=ag.float64).dtype is ag.float64
    assert ag.full((2,), 0.1, dtype=ag.float64).numpy()[0] == 0.1  # not rounded through float32
    assert repr(ag.tensor([0.5], dtype=ag.float64)).endswith(", dtype=torch.float64)")  # shown, as torch


def test_default_dtype_float64():
    ag.set_default_dtype(ag.float64)
    try:
        assert ag.get_default_dtype() is ag.float64
        assert ag.tensor([1.5]).dtype is ag.float64 and ag.zeros(2).dtype is ag.float64
        assert ag.arange(0.0, 1.0, 0.5).dtype is ag.float64 and ag.arange(3).dtype is ag.int64
        assert agnn.Linear(3, 2).weight.dtype is ag.float64
        assert (ag.arange(3) / 2).dtype is ag.float64
    finally:
        ag.set_default_dtype(ag.float32)
    assert ag.tensor([1.5]).dtype is ag.float32
    with pytest.raises(ValueError):
        ag.set_default_dtype(ag.int64)


def test_promotion_as_torch():
    f32 = ag.ones(3)
    f64 = ag.ones(3, dtype=ag.float64)
    cases = [(f32 + f64, torch.ones(3) + torch.ones(3, dtype=torch.float64)),
             (f32 * ag.tensor(2.0, dtype=ag.float64), torch.ones(3) * torch.tensor(2.0, dtype=torch.float64)),
             (f64 * 2.5, torch.ones(3, dtype=torch.float64) * 2.5),
             (f64 + ag.tensor(1, dtype=ag.int64), torch.ones(3, dtype=torch.float64) + torch.tensor(1)),
             (ag.arange(3) * ag.tensor(0.5, dtype=ag.float64), torch.arange(3) * torch.tensor(0.5, dtype=torch.float64))]
    for ours, theirs in cases:
        assert str(ours.dtype) == str(theirs.dtype)
        close(ours, theirs)
    assert str((f64 > f32).dtype) == "torch.bool"


def test_precision_beyond_float32():
    values = np.array([1e8, 1.0, -1e8, 1e-8, 3.0])
    a, t = pair(values, grad=False)
    close(a.sum(), t.sum())
    assert a.sum().item() == pytest.approx(4.00000001, rel=1e-15)
    x = 1.0 + 1e-12
    assert (ag.tensor([x], dtype=ag.float64) - 1.0).item() == pytest.approx(1e-12, rel=1e-4)


UNARY = ["exp", "log", "sqrt", "tanh", "sigmoid", "abs", "neg", "sin", "cos", "relu", "rsqrt", "reciprocal",
         "square", "log1p", "expm1", "floor", "ceil", "round", "sign", "atan", "asin", "erf"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_values_and_gradients(name):
    low = 0.1 if name in ("log", "sqrt", "rsqrt", "reciprocal") else -0.9
    arr = rng.uniform(low, 0.95, (3, 7))
    a, t = pair(arr)
    ours, theirs = getattr(a, name)(), getattr(t, name)()
    close(ours, theirs)
    if name not in ("floor", "ceil", "round", "sign"):
        g = rng.standard_normal(arr.shape)
        ours.backward(ag.tensor(g, dtype=ag.float64))
        theirs.backward(torch.tensor(g))
        close(a.grad, t.grad)


@pytest.mark.parametrize("fn", ["gelu", "silu", "softplus", "elu", "leaky_relu", "hardtanh", "logsigmoid",
                                "mish", "selu", "celu"])
def test_activations(fn):
    arr = rng.standard_normal((2, 5, 3)) * 3
    a, t = pair(arr)
    ours, theirs = getattr(agF, fn)(a), getattr(torch.nn.functional, fn)(t)
    close(ours, theirs)
    ours.sum().backward()
    theirs.sum().backward()
    close(a.grad, t.grad)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "atan2",
                                "remainder"])
def test_binary_broadcast(op):
    x, y = rng.uniform(0.5, 2.0, (4, 1, 5)), rng.uniform(0.5, 2.0, (3, 1))
    a, t = pair(x)
    b, u = pair(y)
    ours, theirs = getattr(a, op)(b), getattr(t, op)(u)
    close(ours, theirs)
    if op != "remainder":
        ours.sum().backward()
        theirs.sum().backward()
        close(a.grad, t.grad)
        close(b.grad, u.grad)


def test_reductions():
    arr = rng.standard_normal((5, 6, 7))
    a, t = pair(arr, grad=False)
    for name, kwargs in [("sum", {"dim": 1}), ("mean", {"dim": (0, 2)}), ("var", {"dim": 2}), ("std", {}),
                         ("amax", {"dim": 0}), ("logsumexp", {"dim": 1}), ("prod", {"dim": 2}),
                         ("cumsum", {"dim": 1}), ("norm", {})]:
        close(getattr(a, name)(**kwargs), getattr(t, name)(**kwargs))
    close(a.max(dim=1).values, t.max(dim=1).values)
    assert a.argmax(dim=2).tolist() == t.argmax(dim=2).tolist()
    close(a.softmax(-1), t.softmax(-1))
    close(a.log_softmax(1), t.log_softmax(1))
    a, t = pair(arr)
    (a.var(dim=1) * a.softmax(0)[:, :1, :1]).sum().backward()
    (t.var(dim=1) * t.softmax(0)[:, :1, :1]).sum().backward()
    close(a.grad, t.grad)


def test_products():
    for shape_a, shape_b in [((7, 5), (5, 3)), ((2, 7, 5), (2, 5, 4)), ((5,), (5, 2)), ((3, 1, 4, 6), (5, 6, 2))]:
        a, t = pair(rng.standard_normal(shape_a))
        b, u = pair(rng.standard_normal(shape_b))
        ours, theirs = a @ b, t @ u
        close(ours, theirs)
        ours.sum().backward()
        theirs.sum().backward()
        close(a.grad, t.grad)
        close(b.grad, u.grad)


def test_linear_conv_pool():
    x, xt = pair(rng.standard_normal((2, 3, 9, 8)))
    w, wt = pair(rng.standard_normal((4, 3, 3, 2)))
    b, bt = pair(rng.standard_normal(4))
    ours = agF.max_pool2d(agF.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2)), 2)
    theirs = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(xt, wt, bt, stride=(2, 1), padding=1,
                                                                      dilation=(1, 2)), 2)
    close(ours, theirs)
    (ours ** 2).sum().backward()
    (theirs ** 2).sum().backward()
    for p, q in ((x, xt), (w, wt), (b, bt)):
        close(p.grad, q.grad)
    lin = agnn.Linear(8, 3).double()
    tl = torch.nn.Linear(8, 3).double()
    with torch.no_grad():
        tl.weight.copy_(torch.tensor(lin.weight.numpy()))
        tl.bias.copy_(torch.tensor(lin.bias.numpy()))
    close(lin(x), tl(xt))


def test_mixed_width_product_is_refused_as_in_torch():
    with pytest.raises((RuntimeError, ValueError), match="same dtype"):
        agnn.Linear(3, 2)(ag.zeros(4, 3, dtype=ag.float64))
    with pytest.raises((RuntimeError, ValueError), match="same dtype"):
        ag.ones(2, 2) @ ag.ones(2, 2, dtype=ag.float64)


def test_lstm_cell_and_losses():
    cell = agnn.LSTMCell(3, 5).double()
    tcell = torch.nn.LSTMCell(3, 5).double()
    with torch.no_grad():
        for name, p in tcell.named_parameters():
            p.copy_(torch.tensor(getattr(cell, name).numpy()))
    x, xt = pair(rng.standard_normal((4, 3)))
    h, c = cell(x)
    ht, ct = tcell(xt)
    close(h, ht)
    close(c, ct)
    target = rng.standard_normal((4, 5))
    loss = agF.mse_loss(h, ag.tensor(target)) + agF.smooth_l1_loss(c, ag.tensor(target))
    tloss = torch.nn.functional.mse_loss(ht, torch.tensor(target)) + torch.nn.functional.smooth_l1_loss(
        ct, torch.tensor(target))
    close(loss, tloss)
    loss.backward()
    tloss.backward()
    close(x.grad, xt.grad)
    close(cell.weight_hh.grad, tcell.weight_hh.grad)
    logits, lt = pair(rng.standard_normal((6, 4)))
    labels = rng.integers(0, 4, 6)
    ce = agF.cross_entropy(logits, ag.tensor(labels))
    tce = torch.nn.functional.cross_entropy(lt, torch.tensor(labels))
    close(ce, tce)
    ce.backward()
    tce.backward()
    close(logits.grad, lt.grad)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_optimizers(name):
    w0 = rng.standard_normal((3, 4))
    a, t = pair(w0)
    kwargs = {"lr": 0.05, "momentum": 0.9} if name == "SGD" else {"lr": 0.05}
    opt, topt = getattr(ag.optim, name)([a], **kwargs), getattr(torch.optim, name)([t], **kwargs)
    for _ in range(4):
        for p, o, lib in ((a, opt, ag), (t, topt, torch)):
            o.zero_grad()
            (lib.sin(p) * p).sum().backward()
            o.step()
    close(a, t, rtol=1e-11)


def test_lbfgs():
    w0 = rng.standard_normal(5)
    a, t = pair(w0)
    target = rng.standard_normal(5)
    opt, topt = ag.optim.LBFGS([a], lr=0.8, max_iter=10), torch.optim.LBFGS([t], lr=0.8, max_iter=10)

    def closure_for(p, o, lib, tgt):
        def closure():
            o.zero_grad()
            loss = ((lib.tanh(p) - tgt) ** 2).sum() + (p ** 4).sum() * 0.01
            loss.backward()
            return loss
        return closure
    for _ in range(2):
        opt.step(closure_for(a, opt, ag, ag.tensor(target)))
        topt.step(closure_for(t, topt, torch, torch.tensor(target)))
    close(a, t, rtol=1e-10)


def test_views_share_float64_storage():
    base = ag.tensor(np.arange(12.0).reshape(3, 4))
    assert base.dtype is ag.float64
    base[:, 1].mul_(10.0)
    base.t()[2].fill_(0.5)
    col = base.narrow(1, 3, 1)
    col.add_(1e-12)
    tb = torch.tensor(np.arange(12.0).reshape(3, 4))
    tb[:, 1].mul_(10.0)
    tb.t()[2].fill_(0.5)
    tb.narrow(1, 3, 1).add_(1e-12)
    close(base, tb, rtol=0, atol=0)
    assert base.stride() == tb.stride() and base[:, 1].stride() == tb[:, 1].stride()


def test_module_double_and_state_dict():
    model = agnn.Sequential(agnn.Linear(4, 3), agnn.Tanh(), agnn.Linear(3, 1))
    model.double()
    assert {p.dtype for p in model.parameters()} == {ag.float64}
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    assert all(v.dtype == np.float64 for v in state.values())
    fresh = agnn.Sequential(agnn.Linear(4, 3), agnn.Tanh(), agnn.Linear(3, 1)).double()
    fresh.load_state_dict({k: ag.tensor(v) for k, v in state.items()})
    x = ag.tensor(rng.standard_normal((2, 4)))
    close(fresh(x), model(x).detach(), rtol=0, atol=0)


def test_nan_inf_and_empty():
    a, t = pair(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0]), grad=False)
    close(a.exp(), t.exp())
    close(a * 0.0, t * 0.0)
    close(a.sum(), t.sum())
    e = ag.zeros(0, 3, dtype=ag.float64)
    assert e.sum(0).shape == (3,) and e.sum().item() == 0.0
    assert ag.tensor(2.5, dtype=ag.float64).item() == 2.5  # 0-d


def test_special_functions_keep_float64():
    # their series are float32-accurate (docs/PYTORCH.md): float64 in, float64 out, near torch's
    x = np.array([0.3, 1.7, 4.2, -2.5])
    for name in ("lgamma", "digamma"):
        ours, theirs = getattr(ag.tensor(x), name)(), getattr(torch.tensor(x), name)()
        assert ours.dtype is ag.float64
        close(ours, theirs, rtol=1e-6, atol=1e-6)
    y = np.array([0.1, -0.5, 0.9])
    ours = ag.tensor(y).erfinv()
    assert ours.dtype is ag.float64
    close(ours, torch.tensor(y).erfinv(), rtol=1e-6, atol=1e-6)
