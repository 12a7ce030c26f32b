"""Views that share storage, against torch on the CPU: every view op gives torch's values,
strides, storage offset and contiguity; in-place ops through a view change the base and
writes to the base show in the view; autograd through views and through in-place ops on
views gives torch's gradients; the version counter and the leaf rules raise as torch's."""

import numpy as np
import pytest
import torch

import anygpu as ag

RNG = np.random.default_rng(7)
DATA = RNG.standard_normal((5, 6, 7)).astype(np.float32)  # odd sizes

# name -> view of a (5, 6, 7) tensor, written once for both libraries
VIEWS = {
    "slice-step": lambda t: t[1:4, ::2, 1::3],
    "int-select": lambda t: t[2],
    "int-middle": lambda t: t[:, 3],
    "none-ellipsis": lambda t: t[None, ..., 2, None],
    "negative-int": lambda t: t[-1, -2],
    "view": lambda t: t.view(30, 7),
    "reshape": lambda t: t.reshape(5, 42),
    "flatten": lambda t: t.flatten(1),
    "transpose": lambda t: t.transpose(0, 2),
    "permute": lambda t: t.permute(1, 2, 0),
    "mT": lambda t: t.mT,
    "t-of-select": lambda t: t[1].t(),
    "narrow": lambda t: t.narrow(1, 2, 3),
    "select": lambda t: t.select(2, 4),
    "squeeze": lambda t: t[:, :1].squeeze(1),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "unsqueeze-of-slice": lambda t: t[:, 1:].unsqueeze(-1),
    "expand": lambda t: t[:, :1].expand(5, 4, 7),
    "diagonal": lambda t: t.diagonal(0, 1, 2),
    "diagonal-offset": lambda t: t.diagonal(2, 0, 2),
    "unfold": lambda t: t.unfold(2, 3, 2),
    "as_strided": lambda t: t.as_strided((4, 3), (7, 2), 5),
    "split": lambda t: t.split(2, dim=1)[1],
    "chunk": lambda t: t.chunk(3, dim=2)[2],
    "unbind": lambda t: t.unbind(1)[4],
    "detach": lambda t: t.detach(),
    "data": lambda t: t.data,
    "view-of-view": lambda t: t[1:, 2:].transpose(0, 1)[1:, ::2],
    "reshape-of-transpose-viewable": lambda t: t.transpose(1, 2).reshape(5, 7, 2, 3),
}
# views whose elements overlap (stride 0 or overlapping windows): torch refuses writes through them
OVERLAPPING = {"expand", "unfold"}


def pair():
    return ag.tensor(DATA.copy()), torch.tensor(DATA.copy())


def same(a, t, tol=1e-6):
    np.testing.assert_allclose(a.numpy(), t.detach().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", VIEWS)
def test_view_values_strides_and_storage_as_torch(name):
    a, t = pair()
    va, vt = VIEWS[name](a), VIEWS[name](t)
    assert va.shape == tuple(vt.shape)
    same(va, vt)
    assert va.stride() == vt.stride()
    assert va.storage_offset() == vt.storage_offset()
    assert va.is_contiguous() == vt.is_contiguous()
    assert va.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert (va.data_ptr() == a.data_ptr()) == (vt.data_ptr() == t.data_ptr())
    c = va.contiguous()
    assert c.is_contiguous() and c.stride() == vt.contiguous().stride()
    same(c, vt)


INPLACE = {
    "add_": lambda v: v.add_(1.5),
    "mul_": lambda v: v.mul_(-2.0),
    "zero_": lambda v: v.zero_(),
    "fill_": lambda v: v.fill_(3.25),
    "sigmoid_": lambda v: v.sigmoid_(),
    "clamp_": lambda v: v.clamp_(-0.5, 0.25),
    "copy_": lambda v: v.copy_(v * 0 + 7) if isinstance(v, torch.Tensor) else v.copy_(v * 0 + 7),
    "setitem": lambda v: v.__setitem__((Ellipsis,), 9.0),
    "iadd": lambda v: v.__iadd__(2.0),
}


@pytest.mark.parametrize("op", INPLACE)
@pytest.mark.parametrize("name", [n for n in VIEWS if n not in OVERLAPPING])
def test_inplace_through_a_view_changes_the_base(name, op):
    a, t = pair()
    va, vt = VIEWS[name](a), VIEWS[name](t)
    INPLACE[op](va)
    INPLACE[op](vt)
    same(a, t)
    same(va, vt)


@pytest.mark.parametrize("name", VIEWS)
def test_a_write_to_the_base_shows_in_the_view(name):
    a, t = pair()
    va, vt = VIEWS[name](a), VIEWS[name](t)
    a.mul_(3.0).add_(1.0)
    t.mul_(3.0).add_(1.0)
    a[1, 2:5] = -4.0
    t[1, 2:5] = -4.0
    same(va, vt)


def test_writes_through_overlapping_views_are_refused_as_torch():
    a, t = pair()
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        t[:, :1].expand(5, 4, 7).add_(1)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        a[:, :1].expand(5, 4, 7).add_(1)


# ---------------------------------------------------------------- autograd

GRAD_VIEWS = [n for n in VIEWS if n not in ("detach", "data")]
MULTI = {"split", "chunk", "unbind"}  # one of several views an op returned


@pytest.mark.parametrize("name", GRAD_VIEWS)
def test_gradient_through_a_view(name):
    weights = None
    grads = []
    for lib in (ag, torch):
        x = lib.tensor(DATA.copy(), requires_grad=True)
        v = VIEWS[name](x)
        if weights is None:
            weights = RNG.standard_normal(tuple(v.shape)).astype(np.float32)
        (v.exp() * lib.tensor(weights)).sum().backward()
        grads.append(x.grad)
    same(grads[0], grads[1], 1e-5)


@pytest.mark.parametrize("op", ["mul_", "sigmoid_", "copy_", "zero_", "setitem", "add_"])
@pytest.mark.parametrize("name", [n for n in GRAD_VIEWS if n not in OVERLAPPING | MULTI and n != "as_strided"])
def test_gradient_of_an_inplace_op_on_a_view_reaches_the_base(name, op):
    """torch's CopySlices: the base's graph sees the write (the written elements' gradient
    goes through the in-place op, the rest straight to the base)."""
    weights = RNG.standard_normal(DATA.shape).astype(np.float32)
    grads = []
    for lib in (ag, torch):
        leaf = lib.tensor(DATA.copy(), requires_grad=True)
        other = lib.tensor(DATA.copy() * 0.5, requires_grad=True)
        base = leaf * 1.0
        v = VIEWS[name](base)
        if op == "copy_":
            v.copy_(VIEWS[name](other) * 2)
        else:
            INPLACE[op](v)
        loss = (base * lib.tensor(weights)).sum() + (v * v).sum()
        loss.backward()
        grads.append((leaf.grad, other.grad))
    same(grads[0][0], grads[1][0], 1e-5)
    if op == "copy_":
        same(grads[0][1], grads[1][1], 1e-5)


@pytest.mark.parametrize("name", sorted(MULTI))
def test_inplace_on_one_of_several_views_in_a_graph_raises_as_torch(name):
    for lib in (torch, ag):
        base = lib.tensor(DATA.copy(), requires_grad=True) * 1.0
        with pytest.raises(RuntimeError, match="is a view and is being modified inplace. This view is the output "
                                               "of a function that returns multiple views"):
            VIEWS[name](base).mul_(2)
        with lib.no_grad():
            VIEWS[name](base).mul_(0)  # outside a graph it is a plain write
        assert float(VIEWS[name](base).detach().abs().sum()) == 0.0


def test_inplace_on_a_view_of_a_leaf_that_requires_grad_raises_as_torch():
    for lib in (torch, ag):
        leaf = lib.tensor(DATA.copy(), requires_grad=True)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is being used in an "
                                               "in-place operation"):
            leaf[0].mul_(2)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            leaf.mul_(2)
        with lib.no_grad():  # allowed there, and the leaf changes
            leaf[0, 0].fill_(5.0)
        assert leaf.detach().numpy()[0, 0].tolist() == [5.0] * 7
        leaf.data[1].zero_()  # .data and detach() views are outside the graph
        leaf.detach()[2, :, 0].fill_(1.0)
        assert float(leaf.detach().numpy()[1].sum()) == 0.0 and leaf.detach().numpy()[2, :, 0].tolist() == [1.0] * 6


@pytest.mark.parametrize("case", ["saved-output", "saved-input-through-view", "saved-by-matmul", "pow-base"])
def test_version_counter_rejects_a_stale_saved_tensor_as_torch(case):
    for lib in (torch, ag):
        x = lib.tensor(DATA[0].copy(), requires_grad=True)
        w = lib.tensor(DATA[1].copy(), requires_grad=True)
        b = x * 1.0
        if case == "saved-output":
            y = b.exp()
            y[1:3].add_(1)  # exp saved its output; a write through a view bumps the shared counter
        elif case == "saved-input-through-view":
            y = b * w
            b.t()[0].zero_()
        elif case == "saved-by-matmul":
            y = b @ w.t()
            b.add_(1)
        else:
            y = b ** 3
            b.detach().mul_(2)  # detach() shares the counter
        with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation has been "
                                               "modified by an inplace operation"):
            y.sum().backward()


@pytest.mark.parametrize("op", ["abs_", "sin_", "log_", "square_", "cos_"])
def test_an_inplace_op_that_saves_its_input_keeps_the_old_value_as_torch(op):
    """y.abs_() saves y's value from before the write (torch keeps the original self), so
    later in-place writes to y do not invalidate it: backward runs and agrees with torch."""
    grads = []
    for lib in (torch, ag):
        x = lib.tensor(np.abs(DATA[0]).copy() + 0.5, requires_grad=True)
        y = x * 2.0
        getattr(y, op)()
        y.mul_(3.0)
        y.add_(1.0)
        (y * y).sum().backward()
        grads.append(x.grad.numpy())
    # f32 rounding relative to the gradient's scale: a GPU's sin/cos (and another order of its
    # sums) are off by a few ulps of values ~1, which the chain rule scales by up to ~50, so an
    # element near 0 (cos_: 0.04 beside 26) is off by ~1e-5 on an H200. A wrong saved value is off by O(1).
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=2e-6 * np.abs(grads[0]).max())


def test_inplace_after_a_use_that_saves_nothing_is_fine_as_torch():
    grads = []
    for lib in (torch, ag):
        x = lib.tensor(DATA[0].copy(), requires_grad=True)
        b = x * 1.0
        y = b + 2.0  # add saves nothing
        z = b * 3.0  # a product with a number saves nothing either
        b[0].mul_(5)
        (y.sum() + z.sum() + (b * b).sum()).backward()
        grads.append(x.grad)
    same(grads[0], grads[1])


def test_view_that_needs_a_copy_raises_and_reshape_copies_as_torch():
    a, t = pair()
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.transpose(0, 1).view(-1)
    with pytest.raises(ValueError, match="view size is not compatible"):
        a.transpose(0, 1).view(-1)
    ra, rt = a.transpose(0, 1).reshape(-1), t.transpose(0, 1).reshape(-1)
    assert ra.is_contiguous() and ra.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
    ra.zero_()
    rt.zero_()
    same(a, t)  # the copy's write does not reach the base


def test_empty_zero_d_and_int_views():
    for lib in (torch, ag):
        v = lib.arange(10)
        v[3:3].zero_()
        v[9].fill_(-1)  # a 0-d view
        v[::4].mul_(10)
        assert v.tolist() == [0, 1, 2, 3, 40, 5, 6, 7, 80, -1]
        assert v[5].stride() == () and v[5].storage_offset() == 5 and v[2:2].numel() == 0


def test_data_and_init_on_slices_write_the_parameter():
    from anygpu.nn import init
    lin = ag.nn.Linear(5, 3)
    ref = torch.nn.Linear(5, 3)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(lin.weight.numpy()))
    patch = RNG.standard_normal((3, 2)).astype(np.float32)
    lin.weight.data[:, :2].copy_(ag.tensor(patch))
    ref.weight.data[:, :2].copy_(torch.tensor(patch))
    same(lin.weight, ref.weight)
    with ag.no_grad():
        init.constant_(lin.weight[:, 4:], 0.5)
    with torch.no_grad():
        torch.nn.init.constant_(ref.weight[:, 4:], 0.5)
    same(lin.weight, ref.weight)
    init.zeros_(lin.weight.data[1])
    torch.nn.init.zeros_(ref.weight.data[1])
    same(lin.weight, ref.weight)


def test_assigning_data_shares_the_new_storage():
    for lib in (torch, ag):
        p = lib.zeros(2, 3)
        q = lib.ones(4, 3)
        p.data = q[1:3]
        q[1].fill_(7)
        assert p.tolist() == [[7.0] * 3, [1.0] * 3]
        assert p.shape == (2, 3)


def test_writes_through_data_do_not_bump_the_version_as_torch():
    """torch's .data does not share the version counter (detach() does): a saved output
    changed through .data is used as it now is, without an error."""
    grads = []
    for lib in (torch, ag):
        x = lib.tensor(DATA[0].copy(), requires_grad=True)
        y = (x * 1.0).exp()
        y.data[1:].add_(1.0)
        y.sum().backward()
        grads.append(x.grad)
    same(grads[1], grads[0], 1e-5)


def test_assigning_data_of_another_dtype_to_a_view_detaches_it_from_the_old_base():
    """`p.data = p.data.half()`-style assignments: the tensor holds the new values, and its
    in-place ops no longer reach the storage it used to view."""
    for lib in (torch, ag):
        base = lib.zeros(4, 3)
        p = base.view(12)
        p.data = lib.ones(12) * 2
        p.add_(1)
        assert base.sum().item() == 0.0 and p.tolist() == [3.0] * 12


def test_squeeze_and_unsqueeze_in_place_as_torch():
    grads = []
    for lib in (torch, ag):
        x = lib.tensor(DATA[:, :1].copy(), requires_grad=True)
        y = x * 2.0
        y.squeeze_(1).unsqueeze_(0)
        v = y[0, 1:, 2:]
        v.unsqueeze_(-1)
        assert tuple(y.shape) == (1, 5, 7) and tuple(v.shape) == (4, 5, 1)
        assert v.stride() == (7, 1, 1) and v.storage_offset() == 9
        (y * lib.tensor(DATA[0, :5, :7])).sum().backward()
        grads.append(x.grad)
    same(grads[1], grads[0])


@pytest.mark.parametrize("name", ["slice-step", "int-middle", "transpose", "diagonal", "narrow", "view-of-view"])
def test_a_view_read_after_its_base_changed_in_place_differentiates_as_torch(name):
    """torch re-makes a view's graph entry from its base's current graph when the base has
    changed in place; a use from before the change keeps the old one."""
    grads = []
    for lib in (torch, ag):
        x = lib.tensor(DATA.copy(), requires_grad=True)
        base = x * 1.0
        v = VIEWS[name](base)
        before = (v * 3.0).sum()
        base.mul_(2.0)
        loss = (v * v).sum() + before + (base * 0.5).sum()
        loss.backward()
        grads.append(x.grad)
    same(grads[1], grads[0], 1e-5)


def test_a_view_that_undoes_a_transpose_reads_the_base_without_a_gather():
    """x.transpose(1, 2).transpose(1, 2) (nanoGPT's attention output, written [B, T, H, D] and
    seen [B, H, T, D], transposed back) is row-major over all of x's storage: a plain tensor on
    x's buffer, so .contiguous() and .view() copy nothing; its values, in-place writes through it,
    its clone and its gradient are torch's."""
    from anygpu.tensor.core import StridedView
    data = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    ours, theirs = ag.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    results = []
    for x in (ours, theirs):
        base = x * 1.0
        back = base.transpose(1, 2).transpose(1, 2)
        flat = back.contiguous().view(2, 60)
        results.append((back, flat, base))
    back, flat, base = results[0]
    assert not isinstance(back, StridedView) and back._buf is base._buf and flat._buf is base._buf
    copy = back.clone()
    copy.add_(1.0)
    np.testing.assert_array_equal(base.detach().numpy(), data)     # the clone is its own storage
    for _, flat_, _ in results:
        (flat_ * flat_).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
    with ag.no_grad():
        results[0][0].mul_(2.0)
    np.testing.assert_array_equal(results[0][2].numpy(), data * 2.0)   # written through to the base
