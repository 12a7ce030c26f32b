"""tensor/compat_shape.py against torch on the CPU: splitting, joining, scatter-like ops,
index factories and small products (forward, gradients, views, out=, bad input)."""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import check_op

TORCH = SimpleNamespace(lib=torch)
ANYGPU = SimpleNamespace(lib=ag)
rng = np.random.default_rng(11)


def ints(high, *shape, low=0):
    return rng.integers(low, high, size=shape).astype(np.int64)


def unique_rows(n, k, count):
    """`count` distinct integers in [0, n) (positions without repeats)."""
    return rng.permutation(n)[:count].astype(np.int64).reshape(k)


def case(name, inputs, fn, **tol):
    return pytest.param(inputs, fn, tol, id=name)


CASES = [
    case("tensor_split/int", [(7, 3)], lambda m, x: m.lib.cat(x.tensor_split(3), 0) * 2),
    case("tensor_split/indices-dim", [(2, 9)], lambda m, x: x.tensor_split([2, -3, 20], dim=-1)[1] * 3),
    case("tensor_split/function", [(5, 4)], lambda m, x: m.lib.tensor_split(x, (1, 3))[2]),
    case("hsplit", [(3, 6)], lambda m, x: m.lib.hsplit(x, 3)[1]),
    case("hsplit/1d", [(6,)], lambda m, x: x.hsplit([1, 4])[2]),
    case("vsplit", [(4, 3)], lambda m, x: m.lib.vsplit(x, [1])[1]),
    case("dsplit", [(2, 3, 4)], lambda m, x: x.dsplit(2)[1]),
    case("split_with_sizes", [(5, 3)], lambda m, x: x.split_with_sizes([2, 3])[1]),
    case("unsafe_split", [(7, 2)], lambda m, x: m.lib.unsafe_split(x, 3)[2]),
    case("unsafe_chunk", [(7, 2)], lambda m, x: x.unsafe_chunk(3)[1]),
    case("ravel", [(3, 4)], lambda m, x: m.lib.ravel(x.t())),
    case("fliplr", [(3, 4, 2)], lambda m, x: m.lib.fliplr(x)),
    case("flipud", [(5,)], lambda m, x: x.flipud()),
    case("adjoint", [(2, 3, 4)], lambda m, x: x.adjoint() * 1),
    case("mH", [(3, 4)], lambda m, x: x.mH * 1),
    case("H", [(3, 4)], lambda m, x: x.H * 1),
    # torch's reference is narrow(...).clone(), the same function: some torch 2.x builds have
    # no derivative for aten::narrow_copy ("not implemented"); ours is tested forward and backward.
    case("narrow_copy", [(4, 5)],
         lambda m, x: x.narrow(-1, 1, 3).clone() if m is TORCH else m.lib.narrow_copy(x, -1, 1, 3)),
    case("diagflat", [(2, 3)], lambda m, x: x.diagflat(-1)),
    case("diagflat/offset", [(4,)], lambda m, x: m.lib.diagflat(x, 2)),
    case("diag_embed/method", [(2, 3)], lambda m, x: x.diag_embed(1, 0, 2)),
    case("take", [(3, 4), ints(12, 2, 3, low=-12)], lambda m, x, i: x.take(i)),
    case("take/function", [(5,), ints(5, 4)], lambda m, x, i: m.lib.take(x, i)),
    case("put/accumulate", [(3, 4), ints(12, 7, low=-12), (7,)], lambda m, x, i, s: x.put(i, s, accumulate=True)),
    case("put/unique", [(3, 4), unique_rows(12, 5, 5), (5,)], lambda m, x, i, s: m.lib.put(x, i, s)),
    case("index_put/accumulate", [(4, 3), ints(4, 6), ints(3, 6), (6,)],
         lambda m, x, i, j, v: x.index_put((i, j), v, accumulate=True)),
    case("index_put/rows", [(4, 3), unique_rows(4, 2, 2), (2, 3)], lambda m, x, i, v: m.lib.index_put(x, (i,), v)),
    case("index_put/broadcast-value", [(4, 3), ints(4, 5), (1,)],
         lambda m, x, i, v: x.index_put((i,), v, accumulate=True)),
    case("select_scatter", [(3, 4), (4,)], lambda m, x, s: m.lib.select_scatter(x, s, 0, -1)),
    case("select_scatter/dim", [(3, 4, 2), (3, 2)], lambda m, x, s: x.select_scatter(s, 1, 2)),
    case("slice_scatter", [(6, 4), (2, 4)], lambda m, x, s: m.lib.slice_scatter(x, s, 0, 1, 5, 2)),
    case("slice_scatter/dim", [(3, 5), (3, 2)], lambda m, x, s: x.slice_scatter(s, dim=-1, start=3)),
    case("diagonal_scatter", [(4, 5), (4,)], lambda m, x, s: m.lib.diagonal_scatter(x, s, 1)),
    case("diagonal_scatter/dims", [(2, 3, 3), (2, 1)], lambda m, x, s: x.diagonal_scatter(s, -2, 1, 2)),
    case("mv", [(3, 4), (4,)], lambda m, x, v: x.mv(v), atol=1e-4),
    case("vdot", [(5,), (5,)], lambda m, x, y: m.lib.vdot(x, y), atol=1e-4),
    case("ger", [(3,), (4,)], lambda m, x, y: m.lib.ger(x, y)),
    case("addmv", [(3,), (3, 4), (4,)], lambda m, x, a, v: m.lib.addmv(x, a, v, beta=0.5, alpha=2), atol=1e-4),
    case("addmv/broadcast", [(1,), (3, 4), (4,)], lambda m, x, a, v: x.addmv(a, v), atol=1e-4),
    case("addr", [(3, 4), (3,), (4,)], lambda m, x, a, b: x.addr(a, b, beta=2, alpha=-1)),
    case("addbmm", [(3, 2), (4, 3, 5), (4, 5, 2)], lambda m, x, a, b: m.lib.addbmm(x, a, b, alpha=0.5), atol=1e-4),
    case("matrix_power/3", [(2, 3, 3)], lambda m, x: x.matrix_power(3), atol=1e-4),
    case("matrix_power/6", [(3, 3)], lambda m, x: m.lib.matrix_power(x * 0.5, 6), atol=1e-4),
    case("matrix_power/0", [(3, 3)], lambda m, x: x.matrix_power(0)),
    case("matrix_power/-2", [np.eye(3, dtype=np.float32) * 2 + rng.uniform(-0.3, 0.3, (3, 3)).astype(np.float32)],
         lambda m, x: x.matrix_power(-2), atol=1e-4, rtol=1e-3),
    case("kron/2d", [(2, 3), (3, 2)], lambda m, x, y: m.lib.kron(x, y)),
    case("kron/ranks", [(2,), (3, 2, 2)], lambda m, x, y: x.kron(y)),
    case("tensordot/int", [(2, 3, 4), (3, 4, 5)], lambda m, x, y: m.lib.tensordot(x, y, 2), atol=1e-4),
    case("tensordot/lists", [(2, 3, 4), (4, 2, 5)], lambda m, x, y: m.lib.tensordot(x, y, ([0, 2], [1, 0])),
         atol=1e-4),
    case("tensordot/0", [(2, 3), (4,)], lambda m, x, y: m.lib.tensordot(x, y, 0)),
    case("chain_matmul", [(2, 3), (3, 4), (4, 2)], lambda m, x, y, z: m.lib.chain_matmul(x, y, z), atol=1e-4),
    case("column_stack", [(3,), (3, 2), ()], lambda m, x, y, z: m.lib.column_stack([x, y, z.expand(3)])),
    case("dstack", [(2, 3), (2, 3, 2), (3,)], lambda m, x, y, z: m.lib.dstack([x, y, z.expand(2, 3)])),
    case("row_stack", [(3,), (2, 3)], lambda m, x, y: m.lib.row_stack((x, y))),
    case("block_diag", [(2, 3), (), (4,), (1, 1)], lambda m, a, b, c, d: m.lib.block_diag(a, b, c, d)),
    case("block_diag/empty-block", [(2, 3), np.zeros((0, 2), np.float32), (2, 1)],
         lambda m, a, b, c: m.lib.block_diag(a, b, c)),
    case("atleast_3d", [(3,)], lambda m, x: m.lib.atleast_3d(x) * 1),
    case("atleast_2d/tuple", [(), (2, 3, 4)], lambda m, x, y: m.lib.atleast_2d(x, y)[0] * 1),
    case("vander", [(4,)], lambda m, x: m.lib.vander(x), grad=False),  # (torch's own vander backward fails)
    case("vander/increasing", [(3,)], lambda m, x: m.lib.vander(x, 5, increasing=True), grad=False),
    case("combinations", [(5,)], lambda m, x: m.lib.combinations(x)),
    case("combinations/replacement", [(3,)], lambda m, x: m.lib.combinations(x, 3, with_replacement=True)),
    case("combinations/r1", [(4,)], lambda m, x: m.lib.combinations(x, 1)),
    case("copy/select_copy", [(3, 4)], lambda m, x: m.lib.select_copy(x, 1, -1)),
    case("copy/slice_copy", [(6, 2)], lambda m, x: m.lib.slice_copy(x, 0, 1, None, 2)),
    case("copy/transpose_copy", [(3, 4)], lambda m, x: m.lib.transpose_copy(x, 0, 1)),
    case("copy/permute_copy", [(2, 3, 4)], lambda m, x: m.lib.permute_copy(x, (2, 0, 1))),
    case("copy/diagonal_copy", [(3, 4)], lambda m, x: m.lib.diagonal_copy(x, 1)),
    case("copy/expand_copy", [(3, 1)], lambda m, x: m.lib.expand_copy(x, (2, 3, 4))),
    case("copy/unfold_copy", [(7,)], lambda m, x: m.lib.unfold_copy(x, 0, 3, 2)),
]


@pytest.mark.parametrize("inputs, fn, tol", CASES)
def test_against_torch(inputs, fn, tol):
    check_op(inputs, lambda *t: fn(TORCH, *t), lambda *a: fn(ANYGPU, *a), **tol)


# ------------------------------------------------------------------ scatter_reduce / index_reduce
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, -1])
def test_scatter_reduce_float(reduce, include_self, dim):
    x = (rng.permutation(20).reshape(4, 5) * 0.13 + 0.5113).astype(np.float32)  # no ties with src either
    src = (rng.permutation(12).reshape(3, 4) * 0.07 + 0.6).astype(np.float32)  # distinct: no ties for amax/amin
    index = ints(x.shape[dim], 3, 4)  # repeats, some positions unhit (torch's backward needs src of index's shape)
    t_out, a_out = check_op([x, src, index], lambda a, s, i: a.scatter_reduce(dim, i, s, reduce, include_self=include_self),
                            atol=1e-5, rtol=1e-4)
    assert a_out.dtype is ag.float32


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_int(reduce, include_self):
    x = ints(9, 3, 4, low=-9)
    src = ints(9, 5, 4, low=-9)
    index = ints(3, 5, 4)
    expected = torch.tensor(x).scatter_reduce(0, torch.tensor(index), torch.tensor(src), reduce, include_self=include_self)
    out = ag.tensor(x).scatter_reduce(0, ag.tensor(index), ag.tensor(src), reduce, include_self=include_self)
    assert out.dtype is ag.int64
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_scatter_reduce_in_place_and_function():
    x, src, index = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32), \
        ints(5, 4, 3)
    t = torch.tensor(x)
    t.scatter_reduce_(0, torch.tensor(index), torch.tensor(src), "amax")
    a = ag.tensor(x)
    same = a.scatter_reduce_(0, ag.tensor(index), ag.tensor(src), "amax")
    assert same is a
    np.testing.assert_allclose(a.numpy(), t.numpy())
    out = ag.zeros(5, 3)
    ag.scatter_reduce(ag.tensor(x), 0, ag.tensor(index), ag.tensor(src), "sum", out=out)
    np.testing.assert_allclose(out.numpy(), torch.tensor(x).scatter_reduce(0, torch.tensor(index), torch.tensor(src),
                                                                          "sum").numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        ag.tensor(x).scatter_reduce(0, ag.tensor(index), ag.tensor(src), "max")
    with pytest.raises(IndexError):
        ag.tensor(x).scatter_reduce(0, ag.tensor(index + 5), ag.tensor(src), "sum")


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    x = (rng.permutation(15).reshape(3, 5) * 0.11 + 0.5).astype(np.float32)
    source = (rng.permutation(21).reshape(3, 7) * 0.09 + 0.7).astype(np.float32)
    index = np.array([0, 4, 0, -1, 2, 4, 0], np.int64)
    t_index = torch.tensor(index % 5)  # torch's index_reduce takes no negatives on the CPU
    check_op([x, source], lambda a, s: a.index_reduce(1, t_index, s, reduce, include_self=include_self),
             lambda a, s: a.index_reduce(1, ag.tensor(index % 5), s, reduce, include_self=include_self))


def test_index_reduce_in_place_int():
    x, source, index = ints(5, 4, 2, low=-5), ints(5, 6, 2, low=-5), ints(4, 6)
    t = torch.tensor(x)
    t.index_reduce_(0, torch.tensor(index), torch.tensor(source), "amin", include_self=False)
    a = ag.tensor(x)
    assert a.index_reduce_(0, ag.tensor(index), ag.tensor(source), "amin", include_self=False) is a
    np.testing.assert_array_equal(a.numpy(), t.numpy())
    with pytest.raises(ValueError):
        a.index_reduce(0, ag.tensor(index), ag.tensor(source), "sum")
    with pytest.raises(ValueError):
        a.index_reduce(0, ag.tensor(index), ag.tensor(source[:3]), "prod")


# ------------------------------------------------------------------ put_ / index_put_ in place, duplicates
def test_put_and_index_put_in_place_accumulate_duplicates():
    x = rng.standard_normal((3, 4)).astype(np.float32)
    rows, cols = np.array([0, 2, 0, 0, 1]), np.array([1, 3, 1, 1, 0])
    values = rng.standard_normal(5).astype(np.float32)
    t = torch.tensor(x)
    t.index_put_((torch.tensor(rows), torch.tensor(cols)), torch.tensor(values), accumulate=True)
    a = ag.tensor(x)
    assert a.index_put_((ag.tensor(rows), ag.tensor(cols)), ag.tensor(values), accumulate=True) is a
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-6, atol=1e-6)
    flat = np.array([5, -7, 5, 5, 11])
    t.put_(torch.tensor(flat), torch.tensor(values), accumulate=True)
    a.put_(ag.tensor(flat), ag.tensor(values), accumulate=True)
    np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-6, atol=1e-6)


def test_put_index_put_integers():
    x = ints(50, 4, 3, low=-50)
    t, a = torch.tensor(x), ag.tensor(x)
    flat = np.array([1, 1, 1, 11, -1])
    src = ints(9, 5)
    t.put_(torch.tensor(flat), torch.tensor(src), accumulate=True)
    a.put_(ag.tensor(flat), ag.tensor(src), accumulate=True)
    np.testing.assert_array_equal(a.numpy(), t.numpy())
    rows = np.array([3, 0, 3])
    t.index_put_((torch.tensor(rows),), torch.tensor(7), accumulate=True)
    a.index_put_((ag.tensor(rows),), ag.tensor(7), accumulate=True)
    np.testing.assert_array_equal(a.numpy(), t.numpy())
    out = ag.index_put(a, (ag.tensor([1]), ag.tensor([2])), ag.tensor(-3))
    assert int(out[1, 2]) == -3 and int(a[1, 2]) != -3 or int(a[1, 2]) == -3


def test_put_bad_input():
    a = ag.zeros(2, 3)
    with pytest.raises(IndexError):
        a.put(ag.tensor([6]), ag.tensor([1.0]))
    with pytest.raises(ValueError):
        a.put(ag.tensor([0, 1]), ag.tensor([1.0]))
    with pytest.raises(IndexError):
        a.take(ag.tensor([-7]))
    with pytest.raises(TypeError):
        a.index_put(ag.tensor([0]), ag.tensor(1.0))


def test_leaf_in_place_refused():
    a = ag.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        a.put_(ag.tensor([0]), ag.tensor([1.0]))


# ------------------------------------------------------------------ views
def test_tensor_split_pieces_are_views():
    for fn in (lambda x: x.tensor_split(3, dim=1), lambda x: x.hsplit([1, 3]), lambda x: ag.vsplit(x, 2),
               lambda x: x.unsafe_split(2, 1), lambda x: x.split_with_sizes([3, 1], 1)):
        base = ag.tensor(np.arange(16, dtype=np.float32).reshape(4, 4))
        twin = torch.arange(16, dtype=torch.float32).reshape(4, 4)
        pieces = fn(base)
        twin_pieces = fn(twin) if fn.__code__.co_names[-1] != "vsplit" else torch.vsplit(twin, 2)
        assert [tuple(p.shape) for p in pieces] == [tuple(p.shape) for p in twin_pieces]
        pieces[-1].mul_(10)
        twin_pieces[-1].mul_(10)
        np.testing.assert_array_equal(base.numpy(), twin.numpy())


def test_dsplit_and_ravel_views():
    base = ag.zeros(2, 3, 4)
    base.dsplit([1])[1].fill_(2)
    twin = torch.zeros(2, 3, 4)
    twin.dsplit([1])[1].fill_(2)
    np.testing.assert_array_equal(base.numpy(), twin.numpy())
    flat = base.ravel()
    flat[5] = 7
    assert float(base[0, 1, 1]) == 7  # a contiguous tensor's ravel is a view
    copy = base.transpose(0, 2).ravel()
    copy[0] = -1
    assert float(base[0, 0, 0]) == 0  # a transposed one's is a copy, as torch's
    m = ag.zeros(2, 3)
    m.adjoint()[2, 1] = 5
    m.mH[0, 0] = 1
    assert m.tolist() == [[1, 0, 0], [0, 0, 5]]


def test_copy_forms_share_nothing():
    x = ag.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    for out in (ag.select_copy(x, 0, 0), ag.t_copy(x), ag.view_copy(x, (3, 2)), ag.unsqueeze_copy(x, 0),
                ag.squeeze_copy(x.reshape(1, 2, 3)), ag.detach_copy(x), ag.alias_copy(x), ag.narrow_copy(x, 1, 0, 2),
                ag.as_strided_copy(x, (2,), (2,))):
        out.fill_(-1)
    pieces = ag.unbind_copy(x) + ag.split_copy(x, 2, 1) + ag.split_with_sizes_copy(x, [1, 1])
    for p in pieces:
        p.fill_(-1)
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert ag.t_copy(x).tolist() == [[0, 3], [1, 4], [2, 5]]
    out = ag.empty(0)
    ag.permute_copy(x, (1, 0), out=out)
    assert out.tolist() == [[0, 3], [1, 4], [2, 5]]


# ------------------------------------------------------------------ out=, dtypes, small predicates
def test_out_forms():
    a, b = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    for name, args in (("kron", (a, b)), ("tensordot", (a, b.T)), ("column_stack", ([a, a],)), ("dstack", ([a, a],)),
                       ("row_stack", ([a, a],)), ("take", (a, np.array([0, 5])))):
        expected = getattr(torch, name)(*[torch.tensor(v) if isinstance(v, np.ndarray) else [torch.tensor(u) for u in v]
                                          for v in args])
        out = ag.zeros(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = getattr(ag, name)(*[ag.tensor(v) if isinstance(v, np.ndarray) else [ag.tensor(u) for u in v]
                                         for v in args], out=out)
        assert result is out
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "int64", "bool"])
def test_dtypes_kept(dtype):
    x = rng.integers(0, 2, (3, 4)).astype(dtype)
    t, a = torch.tensor(x), ag.tensor(x)
    for fn in (lambda m, v: v.fliplr(), lambda m, v: m.column_stack([v, v]), lambda m, v: v.tensor_split(2)[1],
               lambda m, v: m.dstack([v]), lambda m, v: v.take(m.tensor([0, 11])), lambda m, v: v.ravel(),
               lambda m, v: m.block_diag(v, v)):
        expected, actual = fn(torch, t), fn(ag, a)
        assert str(actual.dtype) == str(expected.dtype)
        np.testing.assert_array_equal(actual.numpy(), expected.numpy())
    if dtype != "bool":
        np.testing.assert_array_equal(ag.kron(a, a).numpy(), torch.kron(t, t).numpy())
        np.testing.assert_array_equal(a.fill_diagonal_(1).numpy(), t.fill_diagonal_(1).numpy())
    assert a.is_signed() == t.is_signed()
    assert a.nbytes == a.numel() * a.element_size() and a.itemsize == a.element_size()
    if dtype != "int64":  # (anygpu's int64 is held in 32 bits)
        assert (a.nbytes, a.itemsize) == (t.nbytes, t.itemsize)


def test_integer_products():
    a, b = ints(5, 3, 3), ints(5, 3)
    assert ag.tensor(a).matrix_power(3).tolist() == torch.tensor(a).matrix_power(3).tolist()
    assert ag.tensor(a).mv(ag.tensor(b)).tolist() == torch.tensor(a).mv(torch.tensor(b)).tolist()
    assert ag.vander(ag.tensor(b), 4).tolist() == torch.vander(torch.tensor(b), 4).tolist()


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (7, 3), (3, 5), (3, 3, 3), (4, 2)])
@pytest.mark.parametrize("wrap", [False, True])
def test_fill_diagonal(shape, wrap):
    x = rng.standard_normal(shape).astype(np.float32)
    t, a = torch.tensor(x), ag.tensor(x)
    assert a.fill_diagonal_(-3.5, wrap=wrap) is a
    t.fill_diagonal_(-3.5, wrap=wrap)
    np.testing.assert_array_equal(a.numpy(), t.numpy())


def test_fill_diagonal_view_and_errors():
    base = ag.zeros(4, 6)
    base[:, 2:].fill_diagonal_(1)
    twin = torch.zeros(4, 6)
    twin[:, 2:].fill_diagonal_(1)
    np.testing.assert_array_equal(base.numpy(), twin.numpy())
    with pytest.raises(ValueError):
        ag.zeros(3).fill_diagonal_(1)
    with pytest.raises(ValueError):
        ag.zeros(2, 3, 3).fill_diagonal_(1)


def test_is_same_size():
    assert ag.zeros(2, 3).is_same_size(ag.ones(2, 3)) and not ag.zeros(2, 3).is_same_size(ag.zeros(3, 2))
    assert ag.is_same_size(ag.zeros(0), ag.zeros(0))


# ------------------------------------------------------------------ index factories
@pytest.mark.parametrize("row, col, offset", [(4, 4, 0), (3, 5, 1), (5, 3, -2), (0, 3, 0), (4, 2, 7), (3, 3, -9)])
def test_tril_triu_indices(row, col, offset):
    for name in ("tril_indices", "triu_indices"):
        expected = getattr(torch, name)(row, col, offset)
        actual = getattr(ag, name)(row, col, offset)
        assert actual.dtype is ag.int64 and actual.shape == tuple(expected.shape)
        np.testing.assert_array_equal(actual.numpy(), expected.numpy())
    assert ag.tril_indices(3, 3, dtype=ag.int32).dtype is ag.int32


def test_unravel_index():
    shape = (3, 4, 5)
    flat = ints(60, 2, 7, low=-60)
    expected = torch.unravel_index(torch.tensor(flat), shape)
    actual = ag.unravel_index(ag.tensor(flat), shape)
    assert len(actual) == 3
    for e, a in zip(expected, actual):
        np.testing.assert_array_equal(a.numpy(), e.numpy())
    np.testing.assert_array_equal(ag.unravel_index(ag.tensor(7), 10)[0].numpy(), 7)
    with pytest.raises(ValueError):
        ag.unravel_index(ag.tensor([60]), shape)
    with pytest.raises(TypeError):
        ag.unravel_index(ag.tensor([1.0]), shape)


def test_range_is_inclusive_and_warns():
    from anygpu.tensor.compat_shape import inclusive_range  # (torch.range once functions.py allows it)
    for args, kwargs in (((1, 4), {}), ((0, 1, 0.25), {}), ((5, 1, -2), {}), ((0, 3), {"dtype": torch.int64})):
        with pytest.warns(UserWarning):
            expected = torch.range(*args, **kwargs)
        with pytest.warns(UserWarning):
            actual = inclusive_range(*args, **{k: ag.int64 for k in kwargs})
        assert str(actual.dtype) == str(expected.dtype)
        np.testing.assert_allclose(actual.numpy(), expected.numpy())
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inclusive_range(0, 3, -1)


def test_vander_gradient():
    # torch's own vander backward fails (an in-place op in it), so the reference is its powers
    check_op([(5,)], lambda x: torch.stack([x * x * x, x * x, x, torch.ones_like(x)], 1), lambda x: ag.vander(x, 4))


def test_combinations_edges():
    x = ag.tensor([1.0, 2.0])
    assert ag.combinations(x, 3).shape == tuple(torch.combinations(torch.tensor([1.0, 2.0]), 3).shape)
    assert ag.combinations(x, 0).shape == tuple(torch.combinations(torch.tensor([1.0, 2.0]), 0).shape)
    with pytest.raises(ValueError):
        ag.combinations(ag.zeros(2, 2))


def test_broadcast_shapes_and_atleast():
    assert ag.broadcast_shapes((2, 1), (3, 1, 4), 1) == torch.broadcast_shapes((2, 1), (3, 1, 4), 1)
    with pytest.raises(ValueError):
        ag.broadcast_shapes((2,), (3,))
    for fn in ("atleast_1d", "atleast_2d", "atleast_3d"):
        for shape in ((), (3,), (2, 3), (2, 3, 4), (1, 2, 3, 4)):
            assert getattr(ag, fn)(ag.zeros(shape)).shape == tuple(getattr(torch, fn)(torch.zeros(shape)).shape)
        pair = getattr(ag, fn)([ag.zeros(()), ag.zeros(2)])
        assert isinstance(pair, tuple) and len(pair) == 2


# ------------------------------------------------------------------ bad input
def test_bad_input():
    x = ag.zeros(4, 6)
    with pytest.raises(ValueError):
        x.hsplit(4)  # 6 is not divisible by 4
    with pytest.raises(ValueError):
        ag.zeros(5).vsplit(1)
    with pytest.raises(ValueError):
        x.dsplit(2)
    with pytest.raises(ValueError):
        x.tensor_split(0)
    with pytest.raises(ValueError):
        ag.zeros(3).fliplr()
    with pytest.raises(ValueError):
        x.mv(ag.zeros(5))
    with pytest.raises(ValueError):
        ag.vdot(ag.zeros(3), ag.zeros(4))
    with pytest.raises(ValueError):
        x.matrix_power(2)
    with pytest.raises(ValueError):
        ag.tensordot(x, ag.zeros(5, 2), 1)
    with pytest.raises(ValueError):
        x.select_scatter(ag.zeros(5), 0, 0)
    with pytest.raises(IndexError):
        x.select_scatter(ag.zeros(6), 0, 4)
    with pytest.raises(ValueError):
        x.slice_scatter(ag.zeros(2, 6), 0, 0, 3)
    with pytest.raises(ValueError):
        x.diagonal_scatter(ag.zeros(3))
    with pytest.raises(ValueError):
        ag.block_diag(ag.zeros(1, 1, 1))
    with pytest.raises(ValueError):
        ag.vander(ag.zeros(2, 2))
    with pytest.raises(IndexError):
        x.narrow_copy(0, 3, 2)
    with pytest.raises(ValueError):
        x.addmv(ag.zeros(3, 2), ag.zeros(2))
    with pytest.raises(ValueError):
        _ = ag.zeros(3).H
