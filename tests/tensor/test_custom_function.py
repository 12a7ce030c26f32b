"""torch.autograd.Function (anygpu/custom_function.py) against torch on the CPU: the same
Function classes, written once over a `torch`-like module, give the same values and
gradients; torch's errors for bad backward results."""

import numpy as np
import pytest
import torch

import anygpu as ag


def make_functions(lib):
    """The same custom Functions over `lib` (torch or anygpu)."""
    Function = lib.autograd.Function

    class Exp(Function):  # saves its output
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    class ScaledMul(Function):  # two tensors and a float; grads for the tensors only, a None for the float
        @staticmethod
        def forward(ctx, a, b, scale):
            ctx.save_for_backward(a, b)
            ctx.scale = scale
            return a * b * scale

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            ga = grad * b * ctx.scale if ctx.needs_input_grad[0] else None
            gb = grad * a * ctx.scale if ctx.needs_input_grad[1] else None
            return ga, gb, None

    class SumAndProduct(Function):  # two differentiable outputs and an integer one
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            order = (a > b).int()
            ctx.mark_non_differentiable(order)
            return a + b, a * b, order

        @staticmethod
        def backward(ctx, g_sum, g_prod, g_order):
            a, b = ctx.saved_tensors
            return g_sum + g_prod * b, g_sum + g_prod * a

    class Cube(Function):  # torch 2's form: forward without ctx, setup_context
        @staticmethod
        def forward(x):
            return x * x * x

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3 * x * x

    class BroadcastBias(Function):  # backward returns the output-shaped gradient for a [cols] bias
        @staticmethod
        def forward(ctx, x, bias):
            return x + bias

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    return Exp, ScaledMul, SumAndProduct, Cube, BroadcastBias


@pytest.fixture(scope="module")
def both():
    return make_functions(torch), make_functions(ag)


def pair(rng, *shape, requires_grad=True):
    data = rng.standard_normal(shape).astype(np.float32)
    return (torch.tensor(data, requires_grad=requires_grad), ag.tensor(data, requires_grad=requires_grad))


def close(ours, theirs, rtol=1e-5):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=rtol, atol=1e-6)


def test_single_output_saving_its_result(both, rng):
    (t_exp, *_), (a_exp, *_) = both
    tx, ax = pair(rng, 7, 5)
    tw, aw = pair(rng, 7, 5, requires_grad=False)
    (t_exp.apply(tx) * tw).sum().backward()
    out = a_exp.apply(ax)
    (out * aw).sum().backward()
    close(out, t_exp.apply(tx))
    close(ax.grad, tx.grad)


def test_non_tensor_arguments_and_inputs_without_grad(both, rng):
    (_, t_mul, *_), (_, a_mul, *_) = both
    ta, aa = pair(rng, 3, 9)
    tb, ab = pair(rng, 3, 9, requires_grad=False)
    t_mul.apply(ta, tb, 0.75).pow(2).sum().backward()
    out = a_mul.apply(aa, ab, 0.75)
    out.pow(2).sum().backward()
    close(out, t_mul.apply(ta, tb, 0.75))
    close(aa.grad, ta.grad)
    assert ab.grad is None


@pytest.mark.parametrize("use", ["both", "sum only", "product only"])
def test_several_outputs_each_gradient_in_its_place(both, rng, use):
    (_, _, t_sp, *_), (_, _, a_sp, *_) = both
    ta, aa = pair(rng, 11)
    tb, ab = pair(rng, 11)
    results = []
    for lib_sp, a, b in ((t_sp, ta, tb), (a_sp, aa, ab)):
        s, p, order = lib_sp.apply(a, b)
        loss = {"both": (s * s).sum() + (p * 3).sum(), "sum only": (s * s).sum(), "product only": p.sum()}[use]
        loss.backward()
        results.append((s, p, order))
    (ts, tp, to), (as_, ap, ao) = results
    close(as_, ts)
    close(ap, tp)
    np.testing.assert_array_equal(ao.numpy(), to.numpy())
    assert not ao.requires_grad
    close(aa.grad, ta.grad)
    close(ab.grad, tb.grad)


def test_setup_context_form(both, rng):
    (*_, t_cube, _), (*_, a_cube, _) = both
    tx, ax = pair(rng, 2, 3, 4)
    t_cube.apply(tx).sum().backward()
    out = a_cube.apply(ax)
    out.sum().backward()
    close(out, t_cube.apply(tx))
    close(ax.grad, tx.grad)


def test_a_broadcast_gradient_is_summed_to_the_input_shape(both, rng):
    (*_, t_bias), (*_, a_bias) = both
    tx, ax = pair(rng, 6, 4)
    tbias, abias = pair(rng, 4)
    (t_bias.apply(tx, tbias) ** 2).sum().backward()
    (a_bias.apply(ax, abias) ** 2).sum().backward()
    close(abias.grad, tbias.grad)
    close(ax.grad, tx.grad)


def test_in_a_model_with_an_optimizer(both, rng):
    """The Function between two Linear layers: parameters after SGD steps match torch's."""
    (t_exp, *_), (a_exp, *_) = both
    torch.manual_seed(0)
    tmodel = [torch.nn.Linear(5, 4), torch.nn.Linear(4, 2)]
    amodel = [ag.nn.Linear(5, 4), ag.nn.Linear(4, 2)]
    for t, a in zip(tmodel, amodel):
        a.weight = ag.nn.Parameter(ag.tensor(t.weight.detach().numpy()))
        a.bias = ag.nn.Parameter(ag.tensor(t.bias.detach().numpy()))
    topt = torch.optim.SGD([p for m in tmodel for p in m.parameters()], lr=0.05)
    aopt = ag.optim.SGD([p for m in amodel for p in m.parameters()], lr=0.05)
    x = rng.standard_normal((8, 5)).astype(np.float32) * 0.5
    for _ in range(3):
        for lib, model, opt, exp in ((torch, tmodel, topt, t_exp), (ag, amodel, aopt, a_exp)):
            opt.zero_grad()
            model[1](exp.apply(model[0](lib.tensor(x)))).pow(2).mean().backward()
            opt.step()
    for t, a in zip(tmodel, amodel):
        close(a.weight, t.weight, rtol=1e-4)


def test_without_grad_nothing_is_recorded(both, rng):
    (a_exp, *_) = both[1]
    _, ax = pair(rng, 4)
    with ag.no_grad():
        out = a_exp.apply(ax)
    assert not out.requires_grad
    _, plain = pair(rng, 4, requires_grad=False)
    assert not a_exp.apply(plain).requires_grad


def test_an_input_returned_as_it_is_keeps_its_own_graph(rng):
    class Identity(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    _, ax = pair(rng, 5)
    out = Identity.apply(ax)
    assert out is not ax and ax.grad_fn is None
    out.sum().backward()
    np.testing.assert_allclose(ax.grad.numpy(), np.full(5, 2.0, np.float32))


def test_bad_backward_results_raise_as_in_torch(rng):
    class TooFew(ag.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, grad):
            return grad

    class WrongShape(ag.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return ag.ones(7)

    _, a = pair(rng, 3)
    _, b = pair(rng, 3)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        TooFew.apply(a, b).sum().backward()
    with pytest.raises(RuntimeError, match="invalid gradient at index 0"):
        WrongShape.apply(a).sum().backward()
    with pytest.raises(RuntimeError, match="apply"):
        TooFew()


def test_mark_dirty_says_it_is_not_supported(rng):
    class InPlace(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x

    _, ax = pair(rng, 2)
    with pytest.raises(NotImplementedError, match="mark_dirty"):
        InPlace.apply(ax)


def test_the_names_torch_code_imports():
    from anygpu.autograd import Function
    from anygpu.autograd.function import FunctionCtx, once_differentiable

    assert Function is ag.autograd.Function and callable(once_differentiable) and FunctionCtx


def test_the_same_output_returned_twice(rng):
    """forward returning one tensor twice: as torch, the same tensor comes back twice and its
    gradient reaches backward in the last slot (zeros in the first)."""
    def twice(lib):
        class Twice(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x * 2
                return y, y

            @staticmethod
            def backward(ctx, ga, gb):
                return ga * 2 + gb * 5
        return Twice

    tx, ax = pair(rng, 6)
    ta, tb = twice(torch).apply(tx)
    aa, ab = twice(ag).apply(ax)
    assert (aa is ab) == (ta is tb)
    (ta * 3 + tb * tb).sum().backward()
    (aa * 3 + ab * ab).sum().backward()
    close(ax.grad, tx.grad)


def _unmaterialized(lib, seen: list):
    """Two outputs of x (2x and x^3) with ctx.set_materialize_grads(False): backward notes which
    output gradients arrived as None and adds up the others."""
    class TwoOutputs(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(x)
            return x * 2, x * x * x

        @staticmethod
        def backward(ctx, g_double, g_cube):
            (x,) = ctx.saved_tensors
            seen.append((g_double is None, g_cube is None))
            grad = None
            if g_double is not None:
                grad = g_double * 2
            if g_cube is not None:
                part = g_cube * 3 * x * x
                grad = part if grad is None else grad + part
            return grad
    return TwoOutputs


@pytest.mark.parametrize("use", ["both", "first only", "second only"])
def test_unmaterialized_gradients_of_unused_outputs_are_none(rng, use):
    """After ctx.set_materialize_grads(False) an output no gradient reached gets None in backward, as
    in torch (and with retain_graph a second pass starts afresh); gradients match torch's."""
    seen = {"torch": [], "anygpu": []}
    grads = {}
    x_data = rng.standard_normal(13).astype(np.float32)
    for name, lib in (("torch", torch), ("anygpu", ag)):
        fn = _unmaterialized(lib, seen[name])
        x = lib.tensor(x_data, requires_grad=True)
        double, cube = fn.apply(x)
        loss = {"both": (double * cube).sum(), "first only": (double * double).sum(), "second only": cube.sum()}[use]
        loss.backward(retain_graph=True)
        double.sum().backward()  # a second pass through the same node: only the first output reached
        grads[name] = x.grad
    assert seen["anygpu"] == seen["torch"]
    assert seen["torch"][0] == {"both": (False, False), "first only": (False, True), "second only": (True, False)}[use]
    assert seen["torch"][1] == (False, True)
    close(grads["anygpu"], grads["torch"])
