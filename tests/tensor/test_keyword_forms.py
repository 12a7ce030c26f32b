"""torch's keyword forms (issue 26 item 4): size= on factories, out= on common functions
(written in place, resized as torch), dtype/device/requires_grad/layout/pin_memory/
memory_format accepted as torch accepts them. Each case runs on torch and on anygpu."""

import warnings

import numpy as np
import pytest
import torch

import anygpu as ag

LIBS = [torch, ag]


def host(t):
    return np.asarray(t.detach().numpy())


@pytest.mark.parametrize("make", [
    lambda m: m.empty(size=(2, 3)),
    lambda m: m.zeros(size=(2, 3)),
    lambda m: m.ones(size=[4, 1]),
    lambda m: m.full(size=(2, 5), fill_value=1.5),
    lambda m: m.rand(size=(3,)),
    lambda m: m.randn(size=(2, 1, 3)),
    lambda m: m.randint(0, 5, size=(7,)),
    lambda m: m.randint(5, size=(2, 2)),
    lambda m: m.zeros(2, 3, dtype=m.float32, device="cpu", requires_grad=True, layout=m.strided, pin_memory=False),
    lambda m: m.empty(3, memory_format=m.contiguous_format),
    lambda m: m.empty(2, 2, 3, 1, memory_format=m.channels_last, layout=m.strided),
    lambda m: m.zeros_like(m.ones(3, 2), memory_format=m.preserve_format, layout=m.strided),
    lambda m: m.full_like(m.ones(3), 7, layout=m.strided, memory_format=m.preserve_format),
    lambda m: m.randn_like(m.ones(2, 2), memory_format=m.preserve_format),
    lambda m: m.arange(5, dtype=m.float32, layout=m.strided),
    lambda m: m.eye(3, layout=m.strided, requires_grad=True),
    lambda m: m.linspace(0, 1, 5, layout=m.strided),
])
def test_factories_take_torchs_keywords(make):
    ours, theirs = make(ag), make(torch)
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
    assert ours.requires_grad == theirs.requires_grad
    if not any(name in make.__code__.co_names for name in ("rand", "randn", "randint", "randn_like", "empty")):
        np.testing.assert_array_equal(host(ours), host(theirs))


def test_factory_keyword_errors():
    with pytest.raises(ValueError, match="size given both"):
        ag.zeros(2, size=(2, 3))
    with pytest.raises(ValueError, match="layout must be torch.strided"):
        ag.zeros(2, layout=ag.sparse_coo)
    with pytest.raises(ValueError, match="memory_format"):
        ag.empty(2, memory_format="channels_last")
    for m in LIBS:  # torch takes memory_format on empty and the *_like factories only
        with pytest.raises(TypeError):
            m.ones(2, memory_format=m.contiguous_format)


@pytest.mark.parametrize("call,out_shape", [
    (lambda m, a, b: m.add(a, b, out=OUT), (3, 4)),
    (lambda m, a, b: m.sub(a, b, alpha=2, out=OUT), (3, 4)),
    (lambda m, a, b: m.mul(a, 2.5, out=OUT), (3, 4)),
    (lambda m, a, b: m.div(a, b, out=OUT), (3, 4)),
    (lambda m, a, b: m.matmul(a, b.t(), out=OUT), (3, 3)),
    (lambda m, a, b: m.mm(a, b.t(), out=OUT), (3, 3)),
    (lambda m, a, b: m.cat([a, b], 0, out=OUT), (6, 4)),
    (lambda m, a, b: m.stack([a, b], 1, out=OUT), (3, 2, 4)),
    (lambda m, a, b: m.sum(a, 1, out=OUT), (3,)),
    (lambda m, a, b: m.mean(a, 0, keepdim=True, out=OUT), (1, 4)),
    (lambda m, a, b: m.exp(a, out=OUT), (3, 4)),
    (lambda m, a, b: m.clamp(a, -0.5, 0.5, out=OUT), (3, 4)),
    (lambda m, a, b: m.where(a > 0, a, b, out=OUT), (3, 4)),
    (lambda m, a, b: m.pow(a, 2, out=OUT), (3, 4)),
    (lambda m, a, b: m.cumsum(a, 1, out=OUT), (3, 4)),
    (lambda m, a, b: m.zeros(2, 5, out=OUT), (2, 5)),
    (lambda m, a, b: m.full((3,), 2.0, out=OUT), (3,)),
])
@pytest.mark.parametrize("start_shape", [(3, 4), (0,), (7,)])
def test_out_writes_into_the_given_tensor(call, out_shape, start_shape):
    global OUT
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((3, 4), dtype=np.float32), rng.uniform(1, 2, (3, 4)).astype(np.float32)
    results, warned = [], []
    for m in LIBS:
        OUT = m.full(start_shape, -9.0)
        out = OUT
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = call(m, m.tensor(a_np), m.tensor(b_np))
        assert result is out  # the same tensor, written in place
        assert tuple(out.shape) == out_shape
        warned.append(any("resized" in str(w.message) for w in caught))
        results.append(host(out))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-6)
    assert warned[0] == warned[1], "torch warns when it resizes an out= with elements (not for factories)"
    assert warned[0] or start_shape == out_shape or not np.prod(start_shape) or "zeros" in call.__code__.co_names \
        or "full" in call.__code__.co_names


def test_out_tuples_dtypes_and_errors():
    x = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], np.float32)
    for m in LIBS:
        values, indices = m.empty(0), m.empty(0, dtype=m.long)
        result = m.max(m.tensor(x), 1, out=(values, indices))
        assert result[0] is values and result[1] is indices
        assert values.numpy().tolist() == [5.0, 7.0] and indices.numpy().tolist() == [1, 0]
        s, i = m.empty(0), m.empty(0, dtype=m.long)
        m.sort(m.tensor(x), 1, out=(s, i))
        assert i.numpy().tolist() == [[0, 2, 1], [1, 2, 0]]
        longs = m.empty(0, dtype=m.long)
        m.arange(4, out=longs)
        assert longs.dtype == m.long and longs.numpy().tolist() == [0, 1, 2, 3]
        floats = m.zeros(2, 3)
        m.add(m.tensor([[1, 2, 3], [4, 5, 6]]), 1, out=floats)  # an int result cast into a float out
        assert floats.dtype == m.float32 and floats.numpy().tolist() == [[2, 3, 4], [5, 6, 7]]
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.exp(torch.ones(2), out=torch.empty(2, dtype=torch.long))
    with pytest.raises(ValueError, match="can't be cast"):
        ag.exp(ag.ones(2), out=ag.empty(2, dtype=ag.long))
    for m in LIBS:
        with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
            m.mul(m.ones(2, requires_grad=True), 2, out=m.empty(2))
        with pytest.raises(TypeError):
            m.flatten(m.ones(2, 2), out=m.empty(4))  # a view op: no out= in torch either


def test_out_keeps_the_tensors_identity_for_later_use():
    out = ag.zeros(2)
    view_source = out
    ag.add(ag.tensor([1.0, 2.0]), ag.tensor([3.0, 4.0]), out=out)
    assert view_source.numpy().tolist() == [4.0, 6.0]
    ag.mul(out, 2, out=out)  # out as an input too
    assert out.numpy().tolist() == [8.0, 12.0]


def test_new_factories_and_requires_grad_checks_as_torch():
    for m in LIBS:
        x = m.ones(2)
        assert tuple(x.new_zeros(size=(2, 3)).shape) == (2, 3)
        assert tuple(x.new_ones(size=[4], layout=m.strided).shape) == (4,)
        assert tuple(x.new_empty((1, 2), pin_memory=False).shape) == (1, 2)
        assert x.new_full(size=(2,), fill_value=3.0).numpy().tolist() == [3.0, 3.0]
        for make in (lambda: m.zeros(3, dtype=m.long, requires_grad=True),
                     lambda: m.arange(5, requires_grad=True),
                     lambda: m.full((2,), 7, requires_grad=True)):
            with pytest.raises((RuntimeError, ValueError), match="(?i)only .*float.* can require grad"):
                make()
