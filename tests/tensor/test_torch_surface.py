"""torch's surface on anygpu Tensors: module-level functions, advanced indexing and
writes, in-place ops with autograd, dtypes and integer arithmetic, against torch.

Float cases go through the one torch-oracle helper (forward, then gradients of a random
weighted sum); dtype cases compare dtype names and exact values with torch."""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import Inputs, check_op

TORCH = SimpleNamespace(lib=torch)
ANYGPU = SimpleNamespace(lib=ag)
_inputs = Inputs(11)
pos, ints, grid, distinct = _inputs.pos, _inputs.ints, _inputs.grid, _inputs.distinct


def case(name, inputs, fn, **tol):
    return pytest.param(inputs, fn, tol, id=name)


def _copy(m, x):
    """x * 1: a non-leaf copy in the graph (in-place ops on a leaf that requires grad raise)."""
    return x * 1.0


def _set(y, index, value):
    y[index] = value
    return y


CASES = [
    # ------------------------------------------------ module-level functions mirroring methods
    case("exp/fn", [(3, 5)], lambda m, x: m.lib.exp(x)),
    case("log/fn", [pos(3, 5)], lambda m, x: m.lib.log(x)),
    case("log2", [pos(7)], lambda m, x: m.lib.log2(x)),
    case("log1p", [pos(7)], lambda m, x: m.lib.log1p(x)),
    case("expm1", [(7,)], lambda m, x: m.lib.expm1(x)),
    case("sum/fn-dim", [(3, 5, 2)], lambda m, x: m.lib.sum(x, 1)),
    case("mean/fn-dims", [(3, 5, 2)], lambda m, x: m.lib.mean(x, (0, 2), keepdim=True)),
    case("sigmoid/fn", [(4, 3)], lambda m, x: m.lib.sigmoid(x)),
    case("tanh/fn", [(4, 3)], lambda m, x: m.lib.tanh(x)),
    case("pow/fn", [(4, 3)], lambda m, x: m.lib.pow(x, 3)),
    case("sin/fn", [(5,)], lambda m, x: m.lib.sin(x)),
    case("cos/fn", [(5,)], lambda m, x: m.lib.cos(x)),
    case("abs/fn", [(5,)], lambda m, x: m.lib.abs(x)),
    case("sqrt/fn", [pos(5)], lambda m, x: m.lib.sqrt(x)),
    case("tril/fn", [(4, 5)], lambda m, x: m.lib.tril(x, -1)),
    case("triu/fn", [(2, 4, 3)], lambda m, x: m.lib.triu(x, 1)),
    case("roll/flat", [(3, 5)], lambda m, x: m.lib.roll(x, 4)),
    case("roll/dims", [(3, 5)], lambda m, x: m.lib.roll(x, (1, -2), (0, 1))),
    case("flip", [(3, 4, 2)], lambda m, x: m.lib.flip(x, [0, 2])),
    case("flip/method", [(5,)], lambda m, x: x.flip(0)),
    case("topk/values", [distinct(3, 7)], lambda m, x: m.lib.topk(x, 3).values),
    case("topk/indices", [distinct(3, 7)], lambda m, x: m.lib.topk(x, 3, dim=1)[1]),
    case("topk/smallest-dim0", [distinct(6, 4)], lambda m, x: x.topk(2, dim=0, largest=False).values),
    case("sort/values", [distinct(4, 5)], lambda m, x: m.lib.sort(x, dim=1).values),
    case("sort/descending-dim0", [distinct(4, 5)], lambda m, x: x.sort(0, descending=True)[0]),
    case("argsort", [distinct(3, 6)], lambda m, x: m.lib.argsort(x, dim=-1, descending=True)),
    case("cumsum", [(3, 7)], lambda m, x: m.lib.cumsum(x, 1), atol=1e-4),
    case("cumsum/dim0", [(5, 2)], lambda m, x: x.cumsum(0), atol=1e-4),
    case("cumsum/blocks", [(2, 600)], lambda m, x: x.cumsum(-1), atol=2e-3, rtol=1e-3),
    case("flatten/fn", [(2, 3, 4)], lambda m, x: m.lib.flatten(x, 1)),
    case("clamp/fn", [(3, 4)], lambda m, x: m.lib.clamp(x, -0.5, 0.5)),
    case("clamp/tensor-bounds", [(3, 4), (3, 4)], lambda m, x, lo: x.clamp(min=lo)),
    case("einsum/matmul", [(3, 4), (4, 5)], lambda m, x, y: m.lib.einsum("ij,jk->ik", x, y), atol=1e-4),
    case("einsum/batched", [(2, 3, 4), (2, 4, 5)], lambda m, x, y: m.lib.einsum("bij,bjk->bik", x, y), atol=1e-4),
    case("einsum/attention", [(2, 3, 5, 4), (2, 3, 6, 4)],
         lambda m, q, k: m.lib.einsum("bhqd,bhkd->bhqk", q, k), atol=1e-4),
    case("einsum/outer-implicit", [(3,), (4,)], lambda m, x, y: m.lib.einsum("i,j", x, y)),
    case("einsum/transpose-sum", [(3, 4)], lambda m, x: m.lib.einsum("ij->j", x) + m.lib.einsum("ij->ji", x)[:, 0]),
    case("einsum/three", [(2, 3), (3, 4), (4,)], lambda m, a, b, c: m.lib.einsum("ij,jk,k->i", a, b, c), atol=1e-4),
    case("max/fn", [distinct(3, 4)], lambda m, x: m.lib.max(x)),
    case("max/fn-dim", [distinct(3, 4)], lambda m, x: m.lib.max(x, 1).values),
    case("min/fn-dim", [distinct(3, 4)], lambda m, x: m.lib.min(x, dim=0)[0]),
    case("maximum/fn", [grid(3, 4), grid(4)], lambda m, x, y: m.lib.maximum(x, y)),
    case("argmax/fn", [distinct(3, 4)], lambda m, x: m.lib.argmax(x, dim=1)),
    case("amax", [distinct(3, 4, 2)], lambda m, x: m.lib.amax(x, (0, 2))),
    case("norm", [(3, 4)], lambda m, x: x.norm()),
    case("norm/dim", [(3, 4)], lambda m, x: m.lib.norm(x, dim=1)),
    case("mm", [(3, 4), (4, 2)], lambda m, x, y: m.lib.mm(x, y), atol=1e-4),
    case("mm/method", [(3, 4), (4, 2)], lambda m, x, y: x.mm(y), atol=1e-4),
    case("bmm", [(2, 3, 4), (2, 4, 5)], lambda m, x, y: m.lib.bmm(x, y), atol=1e-4),
    case("dot", [(5,), (5,)], lambda m, x, y: m.lib.dot(x, y), atol=1e-4),
    case("outer", [(3,), (4,)], lambda m, x, y: m.lib.outer(x, y)),
    case("transpose/fn", [(2, 3, 4)], lambda m, x: m.lib.transpose(x, 0, 2)),
    case("permute/fn", [(2, 3, 4)], lambda m, x: m.lib.permute(x, (2, 0, 1))),
    case("reshape/fn", [(2, 6)], lambda m, x: m.lib.reshape(x, (3, 4))),
    case("squeeze/fn", [(3, 1, 2)], lambda m, x: m.lib.squeeze(x, 1)),
    case("unsqueeze/fn", [(3, 2)], lambda m, x: m.lib.unsqueeze(x, 0)),
    case("gather/fn", [(3, 5), ints(5, 3, 2)], lambda m, x, i: m.lib.gather(x, 1, i)),
    case("softmax/fn", [(3, 5)], lambda m, x: m.lib.softmax(x, dim=1)),
    case("log_softmax/fn", [(3, 5)], lambda m, x: m.lib.log_softmax(x, dim=0)),
    case("split/fn", [(5, 3)], lambda m, x: m.lib.split(x, 2)[2] * 3),
    case("chunk/fn", [(6, 3)], lambda m, x: m.lib.chunk(x, 3, dim=0)[1] + 1),
    case("narrow", [(5, 3)], lambda m, x: x.narrow(0, 1, 3)),
    case("unbind", [(3, 4)], lambda m, x: x.unbind(1)[2] * 2),
    case("repeat", [(2, 3)], lambda m, x: x.repeat(2, 1, 3)),
    case("diag/vector", [(4,)], lambda m, x: m.lib.diag(x, 1)),
    case("diag/matrix", [(4, 5)], lambda m, x: m.lib.diag(x, -1)),
    case("var/fn", [(3, 4)], lambda m, x: m.lib.var(x, 1)),
    case("std/fn", [(3, 4)], lambda m, x: m.lib.std(x)),
    case("logsumexp/fn", [(3, 4)], lambda m, x: m.lib.logsumexp(x, 1)),
    case("where/fn-scalar", [grid(3, 4), (3, 4)], lambda m, c, x: m.lib.where(c > 0, x, 0.5)),
    case("masked_fill/fn", [(3, 4), grid(3, 4)], lambda m, x, c: m.lib.masked_fill(x, c > 0, 2.0)),
    case("view_as", [(3, 4), (4, 3)], lambda m, x, y: x.view_as(y) + y),
    case("reshape_as", [(3, 4), (2, 6)], lambda m, x, y: x.reshape_as(y) * y),
    case("expand_as", [(3, 1), (3, 4)], lambda m, x, y: x.expand_as(y) * y),
    case("type_as", [(3, 4), (3, 4)], lambda m, x, y: x.type_as(y) * 2),
    case("floor", [(3, 4)], lambda m, x: (x * 3).floor() + x),
    case("ceil", [(3, 4)], lambda m, x: (x * 3).ceil() + x),
    case("round", [(3, 4)], lambda m, x: (x * 3).round() + x),
    case("round/decimals", [(3, 4)], lambda m, x: x.round(decimals=1)),
    case("trunc", [(3, 4)], lambda m, x: (x * 3).trunc()),
    case("sign", [grid(3, 4)], lambda m, x: x.sign()),
    case("floordiv/float", [(3, 4), pos(3, 4)], lambda m, x, y: x // y, grad=False),  # torch: no derivative
    case("remainder/float", [(3, 4), pos(3, 4)], lambda m, x, y: x % y),
    case("remainder/scalar", [(3, 4)], lambda m, x: x % 0.7),
    case("fmod/float", [(3, 4), pos(3, 4)], lambda m, x, y: m.lib.fmod(x, y) if m is TORCH else x.fmod(y)),
    case("prod/all", [grid(3, 4) * 0.5 + 0.25], lambda m, x: x.prod()),
    case("prod/dim-zero", [np.array([[1.5, 0.0, -2.0], [0.5, 3.0, -1.0]], np.float32)], lambda m, x: m.lib.prod(x, 1)),
    case("prod/keepdim", [(3, 5)], lambda m, x: x.prod(0, keepdim=True)),
    case("cumprod", [(2, 7)], lambda m, x: m.lib.cumprod(x, 1), atol=1e-4),
    case("cumprod/dim0", [pos(5, 2)], lambda m, x: x.cumprod(0), atol=1e-4),
    case("scatter/src", [(3, 5), np.array([[0, 1, 2, 0, 1], [2, 0, 1, 1, 0]]), (2, 5)],
         lambda m, x, i, v: x.scatter(0, i, v)),
    case("scatter/value", [(3, 4), np.array([[3], [0], [2]])], lambda m, x, i: m.lib.scatter(x, 1, i, 0.5)),
    case("scatter_add", [(3, 4), ints(3, 2, 4), (2, 4)], lambda m, x, i, v: x.scatter_add(0, i, v)),
    case("scatter_/graph", [(3, 4), np.array([[1], [3], [0]])], lambda m, x, i: _copy(m, x).scatter_(1, i, -1.0)),
    case("masked_select", [(3, 4), grid(3, 4)], lambda m, x, c: x.masked_select(c > 0)),
    case("masked_select/broadcast", [(3, 4), grid(4)], lambda m, x, c: m.lib.masked_select(x, c > 0)),
    case("repeat_interleave", [(3, 2)], lambda m, x: x.repeat_interleave(2, dim=0)),
    case("repeat_interleave/flat", [(2, 2)], lambda m, x: m.lib.repeat_interleave(x, 3)),
    case("tile", [(2, 3)], lambda m, x: x.tile((2, 2))),
    case("movedim", [(2, 3, 4)], lambda m, x: m.lib.movedim(x, 0, -1)),
    case("select", [(2, 3, 4)], lambda m, x: x.select(1, -1)),
    case("unflatten", [(2, 12)], lambda m, x: x.unflatten(1, (3, 4))),
    case("mT", [(2, 3, 4)], lambda m, x: x.mT),
    case("broadcast_to", [(3, 1)], lambda m, x: m.lib.broadcast_to(x, (2, 3, 4))),
    case("lerp", [(3, 4), (3, 4)], lambda m, x, y: m.lib.lerp(x, y, 0.3)),
    case("addmm", [(3, 5), (3, 4), (4, 5)], lambda m, c, a, b: m.lib.addmm(c, a, b, beta=0.5, alpha=2.0), atol=1e-4),
    case("baddbmm", [(2, 3, 5), (2, 3, 4), (2, 4, 5)], lambda m, c, a, b: c.baddbmm(a, b, alpha=0.5), atol=1e-4),
    case("tan", [(3, 4)], lambda m, x: m.lib.tan(x * 0.5)),
    case("sinh", [(3, 4)], lambda m, x: x.sinh()),
    case("atan", [(3, 4)], lambda m, x: m.lib.atan(x * 2)),
    case("asin", [(3, 4)], lambda m, x: x.mul(0.4).asin(), atol=1e-4),
    case("acos", [(3, 4)], lambda m, x: m.lib.acos(x * 0.4), atol=1e-4),
    case("erf", [(3, 9)], lambda m, x: m.lib.erf(x * 1.5)),
    case("erf/small", [(11,)], lambda m, x: (x * 0.02).erf() * 50),
    case("atan2", [(4, 5), grid(4, 5)], lambda m, y, x: m.lib.atan2(y, x), atol=1e-5),
    case("cosh", [(3, 4)], lambda m, x: m.lib.cosh(x)),
    case("logit", [pos(3, 4) * 0.4], lambda m, x: x.logit()),
    case("frac", [(3, 4)], lambda m, x: (x * 3).frac()),
    case("diff", [(3, 6)], lambda m, x: m.lib.diff(x, dim=1)),
    case("diff/twice", [(7,)], lambda m, x: x.diff(n=2)),
    case("median/dim", [distinct(3, 5)], lambda m, x: x.median(1).values),
    case("median/all", [distinct(4, 3)], lambda m, x: m.lib.median(x)),
    case("take_along_dim", [(3, 5), ints(5, 3, 2)], lambda m, x, i: m.lib.take_along_dim(x, i, dim=1)),
    case("take_along_dim/broadcast", [(3, 5), ints(3, 1, 5)], lambda m, x, i: x.take_along_dim(i, 0)),
    case("diagonal", [(2, 4, 5)], lambda m, x: m.lib.diagonal(x, 1, 1, 2)),
    case("trace", [(4, 4)], lambda m, x: m.lib.trace(x)),
    case("index_add", [(4, 3), np.array([0, 2, 0]), (3, 3)], lambda m, x, i, v: x.index_add(0, i, v, alpha=2)),
    case("inner", [(2, 4), (3, 4)], lambda m, x, y: m.lib.inner(x, y), atol=1e-4),
    case("cross", [(4, 3), (4, 3)], lambda m, x, y: m.lib.cross(x, y, dim=1)),
    case("hypot", [(3, 4), (3, 4)], lambda m, x, y: m.lib.hypot(x, y)),
    case("rot90", [(3, 4)], lambda m, x: m.lib.rot90(x, 1, (0, 1))),
    case("rot90/k3", [(2, 3, 4)], lambda m, x: x.rot90(3, (1, 2))),
    case("kthvalue", [distinct(3, 6)], lambda m, x: x.kthvalue(2, 1).values),
    case("quantile", [distinct(3, 6)], lambda m, x: m.lib.quantile(x, 0.3, dim=1)),
    case("quantile/many", [distinct(9)], lambda m, x: x.quantile(m.lib.tensor([0.1, 0.5, 0.95]))),
    case("cdist", [(4, 3), (5, 3)], lambda m, x, y: m.lib.cdist(x, y), atol=1e-4),
    case("dist", [(4, 3), (4, 3)], lambda m, x, y: m.lib.dist(x, y)),
    case("std_mean", [(3, 4)], lambda m, x: m.lib.std_mean(x, 1)[0] + m.lib.std_mean(x, 1)[1]),
    # ------------------------------------------------ advanced indexing (any rank, lists, masks)
    case("index/list-keepdim", [(2, 3, 4)], lambda m, x: x[:, [-1], :]),
    case("index/tensor-2d", [(7, 3), ints(7, 2, 5)], lambda m, emb, i: emb[i]),
    case("index/pairs", [(4, 5)], lambda m, x: x[[0, 2, 3], [1, 4, 1]]),
    case("index/repeated-rows", [(4, 3)], lambda m, x: x[[1, 1, 3, 1]]),
    case("index/negative", [(4, 5)], lambda m, x: x[[-1, 0], -2]),
    case("index/mask", [(3, 4), grid(3, 4)], lambda m, x, c: x[c > 0]),
    case("index/mask-rows", [(4, 3), grid(4)], lambda m, x, c: x[c >= 0]),
    case("index/non-adjacent", [(2, 3, 4)], lambda m, x: x[0, :, [1, 2]]),
    case("index/middle-tensor", [(2, 5, 3), ints(5, 4)], lambda m, x, i: x[:, i]),
    case("index/ellipsis-list", [(2, 3, 4)], lambda m, x: x[..., [0, 3]]),
    case("index/tensor-slice", [(5, 4), ints(5, 3)], lambda m, x, i: x[i, 1:]),
    case("index/broadcast", [(4, 5), ints(4, 3, 1), ints(5, 1, 2)], lambda m, x, i, j: x[i, j]),
    # ------------------------------------------------ writes: setitem with autograd
    case("setitem/int", [(3, 4), (4,)], lambda m, x, v: _set(_copy(m, x), 1, v)),
    case("setitem/slice", [(3, 4), (3, 2)], lambda m, x, v: _set(_copy(m, x), (slice(None), slice(1, 3)), v)),
    case("setitem/scalar", [(3, 4)], lambda m, x: _set(_copy(m, x), (0, slice(None)), 2.5) * x),
    case("setitem/broadcast", [(3, 4), (4,)], lambda m, x, v: _set(_copy(m, x), slice(0, 2), v)),
    case("setitem/mask", [(3, 4), grid(3, 4)], lambda m, x, c: _set(_copy(m, x), c > 0, 0.0)),
    case("setitem/list", [(4, 3), (2, 3)], lambda m, x, v: _set(_copy(m, x), [0, 2], v)),
    case("setitem/index-tensor", [(5, 3), ints(5, 2, 2), (3,)], lambda m, x, i, v: _set(_copy(m, x), i, v * 2)),
    case("setitem/ellipsis", [(2, 3, 4), (2, 3)], lambda m, x, v: _set(_copy(m, x), (Ellipsis, 0), v)),
    case("setitem/fresh-tensor", [(3,)], lambda m, v: _set(m.lib.zeros(2, 3), 1, v) * 3),
    # ------------------------------------------------ in-place ops inside a graph
    case("iadd/graph", [(3, 4), (3, 4)], lambda m, x, y: _iadd(_copy(m, x), y)),
    case("add_/alpha", [(3, 4), (4,)], lambda m, x, y: _copy(m, x).add_(y, alpha=2.0)),
    case("sub_", [(3, 4), (3, 4)], lambda m, x, y: _copy(m, x).sub_(y)),
    case("mul_", [(3, 4), (3, 4)], lambda m, x, y: _copy(m, x).mul_(y) + x),
    case("div_", [(3, 4), pos(3, 4)], lambda m, x, y: _copy(m, x).div_(y)),
    case("clamp_", [(3, 4)], lambda m, x: _copy(m, x).clamp_(-0.5, 0.5)),
    case("masked_fill_", [(3, 4), grid(3, 4)], lambda m, x, c: _copy(m, x).masked_fill_(c > 0, -1.0)),
    case("relu_-after-use", [(3, 4)], lambda m, x: _relu_after_use(_copy(m, x))),
    case("copy_/graph", [(3, 4), (4,)], lambda m, x, v: _copy(m, x).copy_(v) * x),
    case("fill_/graph", [(3, 4)], lambda m, x: _copy(m, x).fill_(1.5) * x),
]


def _iadd(y, other):
    y += other
    return y


def _relu_after_use(y):
    used = y * 2  # needs y's value before the in-place relu
    y.relu_()
    return used + y


@pytest.mark.parametrize("inputs, fn, tol", CASES)
def test_against_torch(inputs, fn, tol):
    check_op(inputs, lambda *a: fn(TORCH, *a), lambda *a: fn(ANYGPU, *a), **tol)


# ===================================================================== dtypes and integers

A = [[7, -7, 3], [-5, 9, 0]]
B = [[2, -2, 3], [3, 4, -4]]


def both(fn):
    """fn(lib, a, b) on int64 tensors of A and B, with torch and anygpu."""
    return fn(torch, torch.tensor(A), torch.tensor(B)), fn(ag, ag.tensor(A), ag.tensor(B))


INT_CASES = {
    "add": lambda m, a, b: a + b,
    "sub": lambda m, a, b: a - b,
    "mul": lambda m, a, b: a * b,
    "floordiv": lambda m, a, b: a // m.where(b == 0, 1, b),
    "remainder": lambda m, a, b: a % m.where(b == 0, 1, b),
    "truediv": lambda m, a, b: a / m.where(b == 0, 1, b),
    "mul-float-scalar": lambda m, a, b: a * 1.5,
    "add-int-scalar": lambda m, a, b: a + 3,
    "rsub-int-scalar": lambda m, a, b: 10 - a,
    "pow2": lambda m, a, b: a ** 2,
    "pow3": lambda m, a, b: a ** 3,
    "neg": lambda m, a, b: -a,
    "abs": lambda m, a, b: a.abs(),
    "clamp-int": lambda m, a, b: a.clamp(-3, 4),
    "clamp-float": lambda m, a, b: a.clamp(min=0.5),
    "sum": lambda m, a, b: a.sum(),
    "sum-dim": lambda m, a, b: a.sum(0),
    "max": lambda m, a, b: a.max(),
    "max-dim": lambda m, a, b: a.max(1).values,
    "max-dim-indices": lambda m, a, b: a.max(1).indices,
    "min-dim": lambda m, a, b: a.min(dim=0)[0],
    "argmax": lambda m, a, b: a.argmax(),
    "argmin-dim": lambda m, a, b: a.argmin(1),
    "matmul": lambda m, a, b: a @ b.T,
    "matmul-batched": lambda m, a, b: a.reshape(2, 1, 3) @ b.reshape(2, 3, 1),
    "eq": lambda m, a, b: a == b,
    "gt-scalar": lambda m, a, b: a > 0,
    "lt-float": lambda m, a, b: a < 0.5,
    "count": lambda m, a, b: (a > 0).sum(),
    "bool-and": lambda m, a, b: (a > 0) & (b > 0),
    "bool-or": lambda m, a, b: (a > 0) | (b > 0),
    "bool-xor": lambda m, a, b: (a > 0) ^ (b > 0),
    "bool-not": lambda m, a, b: ~(a > 0),
    "bitwise-not": lambda m, a, b: ~a,
    "int-and": lambda m, a, b: a & b,
    "bool-add": lambda m, a, b: (a > 0) + (b > 0),
    "bool-times-float": lambda m, a, b: (a > 0) * 2.5,
    "bool-plus-int": lambda m, a, b: (a > 0) + 1,
    "bool-sum-dim": lambda m, a, b: (a > 0).sum(1),
    "any": lambda m, a, b: (a > 8).any(),
    "all-dim": lambda m, a, b: (a > -6).all(1),
    "to-float": lambda m, a, b: a.float(),
    "float-to-long": lambda m, a, b: (a * 0.7).long(),
    "float-to-int": lambda m, a, b: (a * -0.7).int(),
    "to-bool": lambda m, a, b: a.bool(),
    "int32-plus-int64": lambda m, a, b: a.int() + b,
    "int32-plus-scalar": lambda m, a, b: a.int() + 5,
    "int32-plus-0d-int64": lambda m, a, b: a.int() + m.tensor(5),
    "int-plus-0d-float": lambda m, a, b: a + m.tensor(0.5),
    "int-plus-float-tensor": lambda m, a, b: a + b.float(),
    "where-int": lambda m, a, b: m.where(a > 0, a, b),
    "where-mixed": lambda m, a, b: m.where(a > 0, a, 0.5),
    "cat-promote": lambda m, a, b: m.cat([a.int(), b]),
    "masked_fill-int": lambda m, a, b: a.masked_fill(b > 0, 100),
    "cumsum-int": lambda m, a, b: a.cumsum(1),
    "cumsum-bool": lambda m, a, b: (a > 0).cumsum(0),
    "sort-int": lambda m, a, b: a.sort(1).values,
    "topk-int": lambda m, a, b: a.topk(2).indices,
    "index-int": lambda m, a, b: a[:, [2, 0]],
    "setitem-int": lambda m, a, b: _set(a.clone(), a < 0, 0),
    "iadd-int": lambda m, a, b: _iadd(a.clone(), b),
    "arange": lambda m, a, b: m.arange(5),
    "arange-float": lambda m, a, b: m.arange(0, 1, 0.25),
    "full-int": lambda m, a, b: m.full((2,), 7),
    "full-bool": lambda m, a, b: m.full((2,), True),
    "zeros-long": lambda m, a, b: m.zeros(3, dtype=m.long),
    "ones-bool": lambda m, a, b: m.ones(2, dtype=m.bool),
    "tensor-bools": lambda m, a, b: m.tensor([True, False]),
    "nonzero": lambda m, a, b: m.nonzero(a > 0),
    "isnan": lambda m, a, b: m.isnan(a.float() / m.where(b == 0, 0, 1).float()),
    "eq-method": lambda m, a, b: a.eq(b),
    "new_zeros": lambda m, a, b: a.new_zeros(2, 2),
    "new_full": lambda m, a, b: a.float().new_full((2,), 3.5),
    "new_tensor": lambda m, a, b: a.new_tensor([1, 2]),
    "count_nonzero": lambda m, a, b: m.count_nonzero(a, dim=1),
    "unique": lambda m, a, b: m.unique(b),
    "unique-counts": lambda m, a, b: m.unique(b, return_counts=True)[1],
    "bincount": lambda m, a, b: m.bincount(a.abs().flatten()),
    "prod-int": lambda m, a, b: a.prod(1),
    "cumprod-int": lambda m, a, b: b.cumprod(1),
    "scatter-int": lambda m, a, b: a.scatter(1, m.tensor([[0], [2]]), 5),
    "median-int": lambda m, a, b: a.median(),
    "tril-int": lambda m, a, b: a.tril(),
    "bucketize": lambda m, a, b: m.bucketize(a, m.tensor([-5, 0, 3])),
    "bucketize-right": lambda m, a, b: m.bucketize(a, m.tensor([-5, 0, 3]), right=True),
    "searchsorted": lambda m, a, b: m.searchsorted(m.tensor([[-7, 0, 3], [1, 2, 9]]), a, side="right"),
    "cartesian_prod": lambda m, a, b: m.cartesian_prod(a[0], b[1]),
    "stride": lambda m, a, b: m.tensor(a.reshape(2, 3, 1).stride()),
    "bitwise_and": lambda m, a, b: m.bitwise_and(a, b),
    "triu-bool": lambda m, a, b: (a > 0).triu(1),
}


@pytest.mark.parametrize("name", sorted(INT_CASES))
def test_dtypes_follow_torch(name):
    theirs, ours = both(INT_CASES[name])
    assert str(ours.dtype) == str(theirs.dtype), f"{name}: dtype {ours.dtype}, torch {theirs.dtype}"
    assert ours.shape == tuple(theirs.shape), f"{name}: shape {ours.shape}, torch {tuple(theirs.shape)}"
    if ours.numpy().dtype.kind == "f":  # WGSL's f32 division may be 2.5 ulp off (NVIDIA's is)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=4e-7, atol=0, err_msg=name)
    else:  # integers and bools exactly
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=name)
    assert ours.numpy().dtype == theirs.numpy().dtype, name


def test_integer_matmul_is_exact_beyond_float_precision():
    rng = np.random.default_rng(0)
    a = rng.integers(-3000, 3000, size=(5, 40))
    b = rng.integers(-3000, 3000, size=(40, 3))
    out = ag.tensor(a) @ ag.tensor(b)
    assert out.dtype == ag.int64
    np.testing.assert_array_equal(out.numpy(), a @ b)  # sums beyond 2**24: float32 would round
    np.testing.assert_array_equal((ag.tensor(a, dtype=ag.int32) @ ag.tensor(b, dtype=ag.int32)).numpy(), a @ b)


def test_integer_sum_is_exact_beyond_float_precision():
    values = np.full(10, 2**24 + 1, dtype=np.int64)
    assert ag.tensor(values).sum().item() == int(values.sum())


def test_accuracy_idiom_prints_an_integer():
    pred, target = ag.tensor([1, 2, 3, 4]), ag.tensor([1, 2, 3, 0])
    correct = pred.eq(target).sum().item()
    assert correct == 3 and isinstance(correct, int) and f"{correct}" == "3"
    assert ag.tensor([True, True]).sum().item() == 2


def test_format_index_and_item():
    loss = ag.tensor(0.123456)
    assert f"{loss:.4f}" == "0.1235" and f"{loss}" == f"{torch.tensor(0.123456)}"
    assert "{:.2e}".format(ag.tensor(12345.0)) == "1.23e+04"
    with pytest.raises(TypeError):
        f"{ag.tensor([1.0, 2.0]):.2f}"
    assert list(range(10))[ag.tensor(3)] == 3
    with pytest.raises(TypeError, match="integer"):
        list(range(10))[ag.tensor(3.0)]
    assert isinstance(ag.tensor(2).item(), int) and isinstance(ag.tensor(2.0).item(), float)
    assert ag.tensor(True).item() is True


def test_type_finfo_iinfo_size():
    assert ag.ones(2).type() == torch.ones(2).type() and ag.tensor([1]).type() == torch.tensor([1]).type()
    assert ag.ones(2).type(ag.long).dtype == ag.int64 and ag.ones(2).type("torch.LongTensor").dtype == ag.int64
    for name in ("eps", "max", "min", "tiny", "bits", "resolution"):
        assert getattr(ag.finfo(ag.float32), name) == getattr(torch.finfo(torch.float32), name), name
    assert ag.iinfo(ag.int32).max == torch.iinfo(torch.int32).max
    assert ag.Size([2, 3]) == (2, 3) and ag.Size([2, 3]).numel() == 6
    assert 3 in ag.tensor([1, 2, 3]) and 4 not in ag.tensor([1, 2, 3])
    assert [row.tolist() for row in ag.tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]  # iteration
    with pytest.raises(TypeError, match="0-d"):
        list(ag.tensor(1.0))
    a, b = ag.tensor([[1.0, 2.0], [3.0, 4.0]])  # unpacking rows, as torch
    assert b.tolist() == [3.0, 4.0]
    assert ag.LongTensor([1, 2]).dtype == ag.int64 and ag.FloatTensor(2, 3).shape == (2, 3)
    assert ag.FloatTensor([1, 2]).dtype == ag.float32 and ag.BoolTensor([1, 0]).tolist() == [True, False]


def test_dtype_names_and_refusals():
    assert ag.float is ag.float32 and ag.long is ag.int64 and ag.int is ag.int32
    assert str(ag.bool) == "torch.bool" and ag.float32.is_floating_point and not ag.long.is_floating_point
    with pytest.raises(ValueError, match="float32"):
        ag.zeros(2, dtype=ag.bfloat16)
    assert ag.zeros(2, dtype=ag.double).dtype is ag.float64  # on the host: tests/tensor/test_float64.py
    with pytest.raises(ValueError, match="float32"):
        ag.ones(3).bfloat16()
    assert ag.ones(3).half().dtype is ag.float16  # tests/tensor/test_float16.py covers float16
    assert ag.tensor(np.zeros(2, np.float64)).dtype == ag.float64  # float64 data stays float64, as torch


def test_integer_errors_are_clear():
    with pytest.raises(ValueError, match="mean.*float"):
        ag.tensor([1, 2]).mean()
    with pytest.raises(ValueError, match="matmul.*same kind"):
        ag.tensor([[1, 2]]) @ ag.ones(2, 1)
    with pytest.raises(ValueError, match="negative integer powers"):
        ag.tensor([1, 2]) ** -1
    with pytest.raises(ValueError, match="requires_grad"):
        ag.tensor([1, 2], requires_grad=True)
    with pytest.raises(ValueError, match="tensor.*int32 range"):
        ag.tensor([2**40])


def test_randint_signatures():
    ag.manual_seed(0)
    x = ag.randint(10, (3,))
    assert x.shape == (3,) and x.dtype == ag.int64 and all(0 <= v < 10 for v in x.tolist())
    y = ag.randint(5, 8, (2, 4), dtype=ag.int32)
    assert y.shape == (2, 4) and y.dtype == ag.int32 and all(5 <= v < 8 for v in y.flatten().tolist())
    g1, g2 = ag.Generator().manual_seed(3), ag.Generator().manual_seed(3)
    assert ag.randint(0, 100, (6,), generator=g1).tolist() == ag.randint(0, 100, (6,), generator=g2).tolist()
    assert ag.randint(3, size=(2,)).shape == (2,)
    with pytest.raises(ValueError, match="randint"):
        ag.randint(5, 5, (2,))


# ===================================================================== in-place rules and .data

def test_in_place_on_a_leaf_that_requires_grad_raises_outside_no_grad():
    w = ag.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="leaf"):
        w[0] = 2.0
    with ag.no_grad():
        w.mul_(3.0)
        w[1] = 0.5
    assert w.tolist() == [3.0, 0.5, 3.0] and w.requires_grad and w.is_leaf
    w.data.add_(1.0)  # .data shares the buffer and is outside the graph
    assert w.tolist() == [4.0, 1.5, 4.0]
    (w * 2).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]


def test_in_place_writes_are_seen_by_views_and_data():
    x = ag.zeros(2, 3)
    flat = x.view(6)
    x[0, 1] = 5.0
    x.add_(1.0)
    assert flat.tolist() == [1.0, 6.0, 1.0, 1.0, 1.0, 1.0]
    x.zero_()
    assert flat.tolist() == [0.0] * 6
    x.fill_(2.0).clamp_(max=1.5)
    assert x.tolist() == [[1.5] * 3] * 2
    x.uniform_(-1, 1)
    assert all(-1 <= v <= 1 for v in flat.tolist())
    x.normal_(0, 1)
    assert len(set(flat.tolist())) == 6
    x.data = ag.ones(2, 3)
    assert x.tolist() == [[1.0] * 3] * 2


def test_in_place_result_dtype_rules():
    x = ag.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="can't be cast"):
        x += 0.5
    x += 2
    assert x.tolist() == [3, 4, 5] and x.dtype == ag.int64
    f = ag.zeros(3)
    f += ag.tensor([1, 2, 3])
    assert f.dtype == ag.float32 and f.tolist() == [1.0, 2.0, 3.0]


# ===================================================================== torch.autograd.grad, retain_graph

def test_autograd_grad_matches_torch_and_leaves_grad_alone():
    data = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    results = []
    for lib in (torch, ag):
        x = lib.tensor(data, requires_grad=True)
        hidden = (x * 2.0).tanh()
        loss = (hidden * hidden).sum() + x.sum()
        gx, gh = lib.autograd.grad(loss, [x, hidden], retain_graph=True)
        loss.backward()
        results.append((gx.numpy() if lib is ag else gx.detach().numpy(), gh.numpy() if lib is ag else gh.detach().numpy(),
                        x.grad.numpy() if lib is ag else x.grad.detach().numpy()))
    for ours, theirs in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_autograd_grad_rules():
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    y = ag.tensor([3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="allow_unused"):
        ag.autograd.grad((x * 2).sum(), [x, y])
    gx, gy = ag.autograd.grad((x * 2).sum(), [x, y], allow_unused=True)
    assert gx.tolist() == [2.0, 2.0] and gy is None
    with pytest.raises(ValueError, match="create_graph"):
        ag.autograd.grad((x * 2).sum(), x, create_graph=True)
    (g,) = ag.autograd.grad([x * 2, x * x], x, grad_outputs=[ag.ones(2), ag.tensor([1.0, 0.5])])
    assert g.tolist() == [4.0, 4.0]
    assert ag.autograd.Variable(ag.ones(2), requires_grad=True).requires_grad


def test_retain_graph_allows_a_second_backward():
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):  # freed now, as torch
        loss.backward()
    assert x.grad.tolist() == [4.0, 8.0]
    h = x * 3  # a graph reusing a freed part raises too (an RNN state carried over without detach)
    (h * 1).sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        (h * h).sum().backward()
    assert x.grad.tolist() == [7.0, 11.0] and not h.is_leaf


def test_anomaly_detection_names_the_rule_that_made_nan():
    """torch.autograd.detect_anomaly / set_detect_anomaly: a NaN gradient raises torch's message,
    naming the backward rule (sqrt's at 0, times a 0 from the mul after it); off again afterwards,
    and without it the NaN reaches .grad silently, as in torch."""
    messages = []
    for lib in (torch, ag):
        x = lib.zeros(3, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that anomaly mode is slow
            with lib.autograd.detect_anomaly():
                assert lib.is_anomaly_enabled()
                with pytest.raises(RuntimeError, match=r"returned nan values in its 0th output") as caught:
                    (x.sqrt() * 0).sum().backward()
                messages.append(str(caught.value))
        assert not lib.is_anomaly_enabled()
        (x.sqrt() * 0).sum().backward()
        assert np.isnan(np.asarray(x.grad.tolist())).all()
    assert "Sqrt" in messages[0] and "sqrt" in messages[1]
    previous = ag.autograd.set_detect_anomaly(True)
    assert ag.is_anomaly_enabled() and ag.is_anomaly_check_nan_enabled()
    with ag.autograd.set_detect_anomaly(False):
        assert not ag.is_anomaly_enabled()
    assert ag.is_anomaly_enabled()
    ag.autograd.set_detect_anomaly(False)
    assert not ag.is_anomaly_enabled() and previous is not None
