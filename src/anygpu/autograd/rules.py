"""The backward rule of every differentiable op, in one table keyed by the op's name.

`RULES[name](dev, grad_out, *saved, ...)` returns one gradient Buffer per differentiable
input of op `name`, in the op's argument order (None where `needs` says the input wants
none). `saved` is what the forward kept: Buffers, sizes and shapes, in the op's own order.
The Tape (Layer 1), the Tensor (Layer 2) and nn.functional all differentiate through this
table, so an op's gradient is written once; `backward(name, dev, *saved, **kw)` makes the
closure an `Entry` holds.

Rules trust their inputs (the forward checked them). A rule may return `grad_out` itself,
or one Buffer for several inputs: callers treat gradient Buffers as immutable values (the
engine's accumulation makes new Buffers).

Kinds of signature:
- unary ops (`UNARY_RULES`): (dev, grad_out, x, y, alpha, beta) with x the input and y the
  output of the forward, alpha/beta its parameters -> (grad_x,)
- elementwise binary ops: (dev, grad_out, a, b, out, shapes=None, needs) with shapes
  (a_shape, b_shape, out_shape) when a and b were broadcast (None: equal lengths)
- the rest: the op's own saved values, documented on each rule.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..ops.conv import conv_output_size, conv_transpose_output_size
from ..ops.nd import contiguous_strides, numel

RULES: dict[str, Callable] = {}


def sum_to_shape(dev, grad, grad_shape, shape):
    """ops.nd.sum_to_shape, where a gradient with no elements sums to zeros (x - x.mean(1,
    keepdim=True) over an empty dim 1: the mean's gradient), as torch."""
    if numel(tuple(grad_shape)) == 0 and tuple(grad_shape) != tuple(shape):
        return dev.alloc(numel(tuple(shape)), grad.dtype)
    return dev.sum_to_shape(grad, grad_shape, shape)

BOTH = (True, True)
ALL3 = (True, True, True)


def rule(*names: str):
    """Register the decorated function as the backward rule of each op in `names`."""
    def register(fn):
        for name in names:
            if name in RULES:
                raise ValueError(f"rule: {name!r} already has a backward rule ({RULES[name].__name__})")
            RULES[name] = fn
        return fn
    return register


def backward(name: str, dev, *saved, **kwargs):
    """The closure grad_out -> gradients of op `name`, over what its forward saved."""
    fn = RULES[name]
    return lambda grad_out: fn(dev, grad_out, *saved, **kwargs)


def has_rule(name: str) -> bool:
    return name in RULES


# ============================================================ elementwise, one input

def _zeros_like(dev, g):
    # A fresh zero buffer rather than g * 0, so an infinite g gives 0, not NaN; in g's dtype
    # (f16 for the float16 ops that run on f16 Buffers).
    return dev.alloc(g.len, g.dtype)


# name -> grad_x from (dev, g, x, y, alpha, beta): x the input, y the output.
UNARY_RULES: dict[str, Callable] = {
    "neg": lambda dev, g, x, y, a, b: dev.scale(g, -1.0),
    "exp": lambda dev, g, x, y, a, b: dev.mul(g, y),
    "log": lambda dev, g, x, y, a, b: dev.binary("div", g, x),
    "sqrt": lambda dev, g, x, y, a, b: dev.scale(dev.binary("div", g, y), 0.5),
    "abs": lambda dev, g, x, y, a, b: dev.mul(g, dev.unary("sign", x)),
    "square": lambda dev, g, x, y, a, b: dev.mul(g, dev.scale(x, 2.0)),
    "relu": lambda dev, g, x, y, a, b: dev.binary("relu_backward", g, x),
    "sigmoid": lambda dev, g, x, y, a, b: dev.binary("sigmoid_backward", g, y),
    "tanh": lambda dev, g, x, y, a, b: dev.binary("tanh_backward", g, y),
    "silu": lambda dev, g, x, y, a, b: dev.binary("silu_backward", g, x),
    "gelu": lambda dev, g, x, y, a, b: dev.binary("gelu_backward", g, x),
    "gelu_tanh": lambda dev, g, x, y, a, b: dev.binary("gelu_tanh_backward", g, x),
    # mask_mul selects: an infinite g gives 0 outside the range, not inf * 0 = NaN.
    "clamp": lambda dev, g, x, y, a, b: dev.binary("mask_mul", g, dev.unary("inside", x, a, b)),
    "log1p": lambda dev, g, x, y, a, b: dev.binary("div", g, dev.unary("add_scalar", x, 1.0)),
    "sin": lambda dev, g, x, y, a, b: dev.mul(g, dev.unary("cos", x)),
    "cos": lambda dev, g, x, y, a, b: dev.scale(dev.mul(g, dev.unary("sin", x)), -1.0),
    "atan": lambda dev, g, x, y, a, b: dev.binary("div", g, dev.unary("add_scalar", dev.mul(x, x), 1.0)),
    "asin": lambda dev, g, x, y, a, b: dev.binary("div", g, dev.unary("sqrt", dev.unary("rsub_scalar", dev.mul(x, x), 1.0))),
    "acos": lambda dev, g, x, y, a, b: dev.scale(
        dev.binary("div", g, dev.unary("sqrt", dev.unary("rsub_scalar", dev.mul(x, x), 1.0))), -1.0),
    "erf": lambda dev, g, x, y, a, b: dev.mul(g, dev.scale(dev.unary("exp", dev.scale(dev.mul(x, x), -1.0)), 1.1283791670955126)),
    "reciprocal": lambda dev, g, x, y, a, b: dev.scale(dev.mul(g, dev.mul(y, y)), -1.0),
    "leaky_relu": lambda dev, g, x, y, a, b: dev.binary("leaky_relu_backward", g, x, a),
    "elu": lambda dev, g, x, y, a, b: dev.binary("elu_backward", g, x, a),
    "softplus": lambda dev, g, x, y, a, b: dev.mul(g, dev.unary("softplus_grad", x, a, b)),
    # piecewise constant
    "floor": lambda dev, g, x, y, a, b: _zeros_like(dev, g),
    "ceil": lambda dev, g, x, y, a, b: _zeros_like(dev, g),
    "round": lambda dev, g, x, y, a, b: _zeros_like(dev, g),
    "trunc": lambda dev, g, x, y, a, b: _zeros_like(dev, g),
    "sign": lambda dev, g, x, y, a, b: _zeros_like(dev, g),
    # a tensor and a Python number s = alpha: x + s, x * s, x / s, s - x, s / x, x ** s
    "add_scalar": lambda dev, g, x, y, a, b: g,
    "scale": lambda dev, g, x, y, a, b: dev.scale(g, a),
    "div_scalar": lambda dev, g, x, y, a, b: dev.unary("div_scalar", g, a),
    "rsub_scalar": lambda dev, g, x, y, a, b: dev.scale(g, -1.0),
    "rdiv_scalar": lambda dev, g, x, y, a, b: dev.scale(dev.mul(g, dev.binary("div", y, x)), -1.0),  # -y / x
    # x ** 0 has gradient 0 everywhere (x^-1 would make 0 * inf at x = 0 and +-inf), as torch
    "pow_scalar": lambda dev, g, x, y, a, b: _zeros_like(dev, g) if a == 0 else
    dev.mul(g, dev.scale(dev.unary("pow_scalar", x, a - 1.0), a)),
}


def _unary_rule(grad_x):
    def unary_backward(dev, grad_out, x, y, alpha=0.0, beta=0.0):
        return (grad_x(dev, grad_out, x, y, alpha, beta),)
    return unary_backward


for _name, _grad in UNARY_RULES.items():
    RULES[_name] = _unary_rule(_grad)


# ============================================================ elementwise, two inputs

def _times(dev, g, out_shape, x, x_shape):
    """g * x, x broadcast to g's shape (shapes None: equal lengths)."""
    if out_shape is None:
        return dev.mul(g, x)
    return dev.broadcast_binary("mul", g, out_shape, x, x_shape)[0]


def _reduced(dev, grads, shapes):
    """Sum each gradient of the broadcast output down to its input's shape."""
    if shapes is None:
        return tuple(grads)
    a_shape, b_shape, out_shape = shapes
    ga, gb = grads
    return (None if ga is None else sum_to_shape(dev, ga, out_shape, a_shape),
            None if gb is None else sum_to_shape(dev, gb, out_shape, b_shape))


@rule("add")
def add_backward(dev, grad_out, a=None, b=None, out=None, shapes=None, needs=BOTH):
    """out = a + b: (grad_out, grad_out)."""
    return _reduced(dev, (grad_out if needs[0] else None, grad_out if needs[1] else None), shapes)


@rule("sub")
def sub_backward(dev, grad_out, a=None, b=None, out=None, shapes=None, needs=BOTH):
    """out = a - b: (grad_out, -grad_out)."""
    return _reduced(dev, (grad_out if needs[0] else None, dev.scale(grad_out, -1.0) if needs[1] else None), shapes)


@rule("mul")
def mul_backward(dev, grad_out, a, b, out=None, shapes=None, needs=BOTH):
    """out = a * b: (grad_out * b, grad_out * a)."""
    out_shape = shapes and shapes[2]
    return _reduced(dev, (_times(dev, grad_out, out_shape, b, shapes and shapes[1]) if needs[0] else None,
                          _times(dev, grad_out, out_shape, a, shapes and shapes[0]) if needs[1] else None), shapes)


@rule("div")
def div_backward(dev, grad_out, a, b, out, shapes=None, needs=BOTH):
    """out = a / b: (grad_out / b, -grad_out * out / b)."""
    a_shape, b_shape, out_shape = shapes or (None, None, None)
    divide = (lambda x, x_shape, y: dev.binary("div", x, y)) if shapes is None else (
        lambda x, x_shape, y: dev.broadcast_binary("div", x, x_shape, y, b_shape)[0])
    ga = divide(grad_out, out_shape, b) if needs[0] else None
    gb = dev.scale(dev.mul(grad_out, divide(out, out_shape, b)), -1.0) if needs[1] else None
    return _reduced(dev, (ga, gb), shapes)


@rule("pow")
def pow_backward(dev, grad_out, a, b, out, shapes=None, needs=BOTH):
    """out = a ** b: (grad_out * b * a^(b-1), grad_out * out * log(a)); a^(b-1) is computed,
    not out / a, so a = 0 divides nothing; where b = 0 the first is 0 (mask_mul), as torch."""
    a_shape, b_shape, out_shape = shapes or (None, None, None)
    ga = gb = None
    if needs[0]:
        b_minus_1 = dev.unary("add_scalar", b, -1.0)
        if shapes is None:
            ga = dev.mul(grad_out, dev.binary("mask_mul", dev.binary("pow", a, b_minus_1), b))
        else:
            p, _ = dev.broadcast_binary("pow", a, a_shape, b_minus_1, b_shape)
            ga = dev.mul(grad_out, dev.broadcast_binary("mask_mul", p, out_shape, b, b_shape)[0])
    if needs[1]:
        ga_log = dev.unary("log", a)
        gb = dev.mul(grad_out, _times(dev, out, out_shape, ga_log, a_shape))
    return _reduced(dev, (ga, gb), shapes)


def _extreme_rule(op: str):
    def extreme_backward(dev, grad_out, a, b, out=None, shapes=None, needs=BOTH):
        """out = maximum(a, b) (minimum): the gradient goes to the larger (smaller) input,
        split evenly on ties, whole to both where either is NaN, as in torch."""
        a_shape, b_shape, out_shape = shapes or (None, None, None)

        def share(x, x_shape, y, y_shape):
            if shapes is None:
                return dev.binary(op + "_share", x, y)
            return dev.broadcast_binary(op + "_share", x, x_shape, y, y_shape)[0]
        # Select, not multiply (mask_mul): an infinite grad_out gives 0 to the input that lost.
        ga = dev.binary("mask_mul", grad_out, share(a, a_shape, b, b_shape)) if needs[0] else None
        gb = dev.binary("mask_mul", grad_out, share(b, b_shape, a, a_shape)) if needs[1] else None
        return _reduced(dev, (ga, gb), shapes)
    return extreme_backward


rule("maximum")(_extreme_rule("maximum"))
rule("minimum")(_extreme_rule("minimum"))


@rule("where")
def where_backward(dev, grad_out, cond, a_shape, b_shape, shape, needs=BOTH):
    """out = where(cond, a, b) broadcast to `shape`: grad_out where cond (else 0) to a, the
    rest to b, each summed down to its input's shape."""
    zero = dev.alloc(grad_out.len)
    ga = sum_to_shape(dev, dev.where(cond, grad_out, zero), shape, a_shape) if needs[0] else None
    gb = sum_to_shape(dev, dev.where(cond, zero, grad_out), shape, b_shape) if needs[1] else None
    return ga, gb


# ============================================================ reductions

@rule("sum")
def sum_backward(dev, grad_out, x_shape, kept_shape):
    """out = x summed over some dims (kept_shape: x's shape with those dims 1): grad_out
    broadcast back to x_shape."""
    n = 1
    for size in x_shape:
        n *= size
    return (dev.broadcast_binary("add", dev.alloc(n), tuple(x_shape), grad_out, tuple(kept_shape))[0],)


@rule("max_all", "min_all")
def extreme_all_backward(dev, grad_out, x, value, x_shape):
    """out = max(x) (min) over everything, 1 element: grad_out shared evenly among the
    elements equal to it (among the NaNs when it is NaN), as in torch."""
    n = x.len
    hits, _ = dev.broadcast_binary("same", x, tuple(x_shape), value, ())
    share = dev.binary("div", grad_out, dev.reduce_axis(hits, 1, n, 1, "sum"))
    return (dev.broadcast_binary("mask_mul", share, (), hits, tuple(x_shape))[0],)


@rule("logsumexp")
def logsumexp_backward(dev, grad_out, x, out, x_shape, kept_shape):
    """out = log(sum(exp(x))) over one dim of x (size 1 in kept_shape): grad_out * exp(x - out),
    0 (not 0 * inf) for a finite x beside an infinite one, as torch."""
    shifted, _ = dev.broadcast_binary("sub", x, tuple(x_shape), out, tuple(kept_shape))
    weights = dev.unary("exp", shifted)
    return (dev.broadcast_binary("mul", grad_out, tuple(kept_shape), weights, tuple(x_shape))[0],)


@rule("max_dim", "min_dim")
def extreme_dim_backward(dev, grad_out, indices, outer: int, mid: int, inner: int):
    """values = max(x, dim) (min) with x viewed as [outer, mid, inner] and indices [outer, inner]
    (i32): grad_out routed to the arg position (one-hot(index) * grad_out)."""
    positions = dev.upload(np.arange(mid, dtype=np.float32))
    onehot, _ = dev.broadcast_binary("eq", positions, (1, mid, 1), dev.cast(indices, "f32"), (outer, 1, inner))
    return (dev.broadcast_binary("mask_mul", grad_out, (outer, 1, inner), onehot, (outer, mid, inner))[0],)


@rule("softmax")
def softmax_backward(dev, grad_out, y, rows: int, cols: int):
    """y = softmax of x [rows, cols] along cols: from the output y."""
    return (dev.softmax_backward(grad_out, y, rows, cols),)


# ============================================================ shapes and indexing

@rule("identity", "reshape", "clone")
def identity_backward(dev, grad_out):
    """Ops that move no element (reshape, clone)."""
    return (grad_out,)


@rule("to")
def to_backward(dev, grad_out, source: str):
    """out = x converted between float storage dtypes (f32 <-> f16): the gradient goes back
    converted to x's storage dtype `source`."""
    return (grad_out if grad_out.dtype == source else dev.cast(grad_out, source),)


@rule("permute")
def permute_backward(dev, grad_out, x_shape, dims):
    """out = x permuted by dims (out.shape[i] = x_shape[dims[i]]): the inverse permutation."""
    out_strides = contiguous_strides(tuple(x_shape[d] for d in dims))
    inverse = tuple(dims.index(i) for i in range(len(dims)))
    return (dev.strided_gather(grad_out, tuple(x_shape), tuple(out_strides[d] for d in inverse)),)


@rule("expand")
def expand_backward(dev, grad_out, x_shape, shape):
    """out = x broadcast to shape: summed back down to x_shape."""
    return (sum_to_shape(dev, grad_out, shape, x_shape),)


@rule("getitem")
def getitem_backward(dev, grad_out, x_len: int, shape, strides, offset: int):
    """out = the strided view (shape, strides, offset) of x (x_len elements): grad_out
    scattered into zeros at those positions."""
    full = dev.alloc(x_len, grad_out.dtype)
    dev.strided_scatter(grad_out, full, shape, strides, offset)
    return (full,)


@rule("gather", "index_select", "embedding")
def gather_backward(dev, grad_out, index, outer: int, dim_size: int, n_index: int, inner: int,
                    per_element: bool = False, skip: int = -1):
    """out = gather_axis(x, index, ...): grad_out scatter-added to x's positions (entries
    whose index is `skip` add nothing: embedding's padding_idx)."""
    return (dev.scatter_add_axis(grad_out, index, outer, dim_size, n_index, inner, per_element=per_element,
                                 skip=skip),)


@rule("scatter")
def scatter_backward(dev, grad_out, positions, n: int):
    """out = x with the n flat `positions` overwritten by src: x's gradient is grad_out with
    those positions zeroed, src's is grad_out gathered from them."""
    return (dev.index_put(dev.copy(grad_out), positions, dev.alloc(n)),
            dev.gather_axis(grad_out, positions, 1, len(grad_out), n, 1))


@rule("scatter_add")
def scatter_add_backward(dev, grad_out, positions, n: int):
    """out = x with src added at the n flat `positions`: x's gradient is grad_out itself,
    src's is grad_out gathered from those positions."""
    return grad_out, dev.gather_axis(grad_out, positions, 1, len(grad_out), n, 1)


@rule("cat")
def cat_backward(dev, grad_out, shapes, out_strides, offsets):
    """out = the inputs (of `shapes`) placed at `offsets` of a tensor with out_strides:
    each input's gradient is its slice of grad_out."""
    return tuple(dev.strided_gather(grad_out, shape, out_strides, offset) for shape, offset in zip(shapes, offsets))


@rule("transpose")
def transpose_backward(dev, grad_out, outer: int, d0: int, d1: int, inner: int):
    """out = transpose(a, outer, d0, d1, inner) -> (the transpose back,)."""
    return (dev.transpose(grad_out, outer, d1, d0, inner),)


@rule("concat")
def concat_backward(dev, grad_out, outer: int, a_inner: int, b_inner: int, needs=BOTH):
    """out [outer, a_inner + b_inner] = concat(a, b) -> (grad_out[:, :a_inner], grad_out[:, a_inner:])."""
    width = a_inner + b_inner
    grad_a = dev.strided_gather(grad_out, (outer, a_inner), (width, 1), 0) if needs[0] else None
    grad_b = dev.strided_gather(grad_out, (outer, b_inner), (width, 1), a_inner) if needs[1] else None
    return grad_a, grad_b


@rule("pad")
def pad_backward(dev, grad_out, x_shape, strides, offset: int):
    """out = x zero-padded (x sits at `offset` with `strides` inside out): x's window of grad_out."""
    return (dev.strided_gather(grad_out, tuple(x_shape), strides, offset),)


# ============================================================ bias adds

@rule("add_broadcast")
def add_broadcast_backward(dev, grad_out, outer: int, inner: int, needs=BOTH):
    """out[o, i] = a[o, i] + b[o] -> (grad_out, sum over i of grad_out)."""
    return (grad_out if needs[0] else None,
            dev.sum_inner(grad_out, outer, inner) if needs[1] else None)


@rule("add_per_col")
def add_per_col_backward(dev, grad_out, rows: int, cols: int, needs=BOTH):
    """out[r, c] = a[r, c] + b[c] -> (grad_out, sum over r of grad_out)."""
    return (grad_out if needs[0] else None,
            dev.sum_rows(grad_out, rows, cols) if needs[1] else None)


# ============================================================ products

@rule("batch_matmul", "bmm")
def batch_matmul_backward(dev, grad_out, a, b, batch: int, m: int, n: int, k: int, needs=BOTH):
    """C[z] = A[z] @ B[z] (A [batch, m, k], B [batch, k, n]) ->
    (dA = dC @ B^T, dB = A^T @ dC); the transposes are read through strides, never copied."""
    grad_a = dev.matmul_strided(grad_out, b, batch, m, k, n, trans_b=True) if needs[0] else None
    grad_b = dev.matmul_strided(a, grad_out, batch, k, n, m, trans_a=True) if needs[1] else None
    return grad_a, grad_b


@rule("matmul")
def matmul_backward(dev, grad_out, a, b, m: int, n: int, k: int, needs=BOTH):
    """C = A @ B (A [m, k], B [k, n]) -> (dA [m, k] = dC B^T, dB [k, n] = A^T dC)."""
    return batch_matmul_backward(dev, grad_out, a, b, 1, m, n, k, needs)


@rule("linear")
def linear_backward(dev, grad_out, x, weight, rows: int, in_f: int, out_f: int, needs=ALL3):
    """y [rows, out_f] = x [rows, in_f] @ weight [out_f, in_f]^T + bias [out_f] ->
    (dy W, dy^T x, sum over rows of dy). dy W comes last: its product is still pending when
    the rule of the op before (an activation's backward) reads it, and takes that in its
    store (ops/fusion.py)."""
    grad_w = dev.matmul_strided(grad_out, x, 1, out_f, in_f, rows, trans_a=True, op="linear") if needs[1] else None
    grad_b = dev.sum_rows(grad_out, rows, out_f) if len(needs) > 2 and needs[2] else None
    grad_x = dev.matmul_strided(grad_out, weight, 1, rows, in_f, out_f, op="linear") if needs[0] else None
    return grad_x, grad_w, grad_b


@rule("scaled_dot_product_attention")
def attention_backward(dev, grad_out, q, k, v, batch_heads: int, seq_len: int, d_k: int, needs=ALL3):
    """out = softmax(q k^T / sqrt(d_k)) v, each [batch_heads, seq_len, d_k]; the backward
    recomputes the probabilities rather than keeping [batch_heads, seq_len, seq_len]."""
    return dev.attention_backward(grad_out, q, k, v, batch_heads, seq_len, d_k)


@rule("attention")
def attention_probs_backward(dev, grad_out, q, k, v, probs, kept, batch: int, length: int, source: int,
                             embed: int, embed_v: int, scale: float, dropout_p: float, seed, mask_shapes=None,
                             causal: bool = False, needs=(True, True, True, False)):
    """out [batch, length, embed_v] = kept @ v with kept = dropout(probs) (seed None: no
    dropout), probs = softmax(scale q k^T + mask) [batch, length, source], q [batch, length,
    embed], k [batch, source, embed], v [batch, source, embed_v]; mask_shapes = (scores
    shape, mask shape) when a float mask was added; causal: probs came from softmax_causal
    (is_causal without a mask tensor). Gradients for (q, k, v, mask):
    dV = P^T dO, dP = dO V^T, dS = softmax'(dP), dQ = scale dS K, dK = scale dS^T Q."""
    need_q, need_k, need_v, need_mask = needs
    op = "scaled_dot_product_attention"
    # f16 q, k, v (kept rounded to f16, probs f32): f16 products, dP and dS in f32, dS rounded
    # to f16 for dQ and dK, which come back f16 as their inputs.
    half = q.dtype == "f16"
    grad_out = dev.cast(grad_out, q.dtype)
    grad_v = dev.matmul_strided(kept, grad_out, batch, source, embed_v, length, trans_a=True, op=op) \
        if need_v else None
    if not (need_q or need_k or need_mask):
        return None, None, grad_v, None
    grad_kept = dev.matmul_strided(grad_out, v, batch, length, source, embed_v, trans_b=True, op=op,
                                   out_dtype="f32" if half else None)
    grad_probs = dev.dropout(grad_kept, dropout_p, seed) if seed is not None else grad_kept
    if causal:
        grad_scores = dev.softmax_causal_backward(grad_probs, probs, batch * length, source, length)
    else:
        grad_scores = dev.softmax_backward(grad_probs, probs, batch * length, source)
    grad_scores16 = dev.cast(grad_scores, "f16") if half else grad_scores
    grad_q = dev.matmul_strided(grad_scores16, k, batch, length, embed, source, alpha=scale, op=op) \
        if need_q else None
    grad_k = dev.matmul_strided(grad_scores16, q, batch, source, embed, length, trans_a=True, alpha=scale,
                                op=op) if need_k else None
    grad_mask = sum_to_shape(dev, grad_scores, *mask_shapes) if need_mask else None
    return grad_q, grad_k, grad_v, grad_mask


# ============================================================ losses


@rule("binary_cross_entropy")
def binary_cross_entropy_backward(dev, grad_out, x, target, needs=BOTH):
    """out = -(t log x + (1 - t) log(1 - x)) elementwise (logs clamped at -100 forward):
    torch's gradients, g (x - t) / max(x (1 - x), 1e-12) for x (finite at 0 and 1) and
    g (log(1 - x) - log(x)) for t (the unclamped logs)."""
    one_minus_x = dev.unary("rsub_scalar", x, 1.0)
    grad_x = grad_t = None
    if needs[0]:
        denominator = dev.unary("clamp", dev.mul(x, one_minus_x), 1e-12, float("inf"))
        grad_x = dev.binary("div", dev.mul(grad_out, dev.sub(x, target)), denominator)
    if needs[1]:
        grad_t = dev.mul(grad_out, dev.sub(dev.unary("log", one_minus_x), dev.unary("log", x)))
    return grad_x, grad_t

@rule("mse_loss")
def mse_loss_backward(dev, grad_out, pred, target, needs=BOTH):
    """out = mean((pred - target)^2), grad_out 1 element ->
    (2 (pred - target) g / n, -2 (pred - target) g / n) with g = grad_out[0].

    g stays on the GPU (broadcast multiply), so no read-back interrupts the walk."""
    n = pred.len
    diff = dev.sub(pred, target)
    diff_g, _ = dev.broadcast_binary("mul", diff, (n,), grad_out, (1,))
    grad_pred = dev.scale(diff_g, 2.0 / n) if needs[0] else None
    grad_target = dev.scale(diff_g, -2.0 / n) if needs[1] else None
    return grad_pred, grad_target


@rule("cross_entropy_rows")
def cross_entropy_rows_backward(dev, grad_out, logits, target, weight, stats, rows: int, classes: int,
                                ignore_index: int, log_probs: bool):
    """parts [2, rows] = the per-row nll and smoothing terms of logits [rows, classes]
    (ops/lossfn.py): one fused kernel."""
    return (dev.cross_entropy_rows_backward(grad_out, logits, target, weight, stats, rows, classes,
                                            ignore_index, log_probs),)


@rule("cross_entropy_mean")
def cross_entropy_mean_backward(dev, grad_out, logits, target, weight, stats, rows: int, classes: int,
                                ignore_index: int, log_probs: bool):
    """loss = reduction='mean' of the rows' nll (ops/lossfn.py): one fused kernel."""
    return (dev.cross_entropy_rows_backward(grad_out, logits, target, weight, stats, rows, classes,
                                            ignore_index, log_probs, mean=True),)


# ============================================================ images and normalisation

def _conv_grad_bias(dev, grad_out, batch: int, out_c: int, out_h: int, out_w: int, needs):
    """d bias [out_c] of conv2d and conv_transpose2d (grad_out summed over batch and positions)
    when a third input (the bias) needs it, else None."""
    return dev.conv2d_grad_bias(grad_out, batch, out_c, out_h, out_w) if len(needs) > 2 and needs[2] else None


@rule("conv2d")
def conv2d_backward(dev, grad_out, input, weight, batch: int, in_c: int, in_h: int, in_w: int,
                    out_c: int, kh: int, kw: int, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
                    groups: int = 1, needs=ALL3):
    """Gradients of conv2d for (input, weight, bias); stride, padding, dilation are (h, w) pairs.

    grad_out [batch, out_c, out_h, out_w] -> (d input [batch, in_c, in_h, in_w],
    d weight [out_c, in_c/groups, kh, kw], d bias [out_c]). The input gradient is exactly
    in_h x in_w even where the window's last step left rows or columns unread
    ((in + 2 pad - dil (k - 1) - 1) mod stride != 0): conv2d_grad_input pads for it.
    The input gradient comes last: it is deferred (ops/conv.py), and an activation's
    backward applied to it next joins its store."""
    out_h = conv_output_size(in_h, kh, stride[0], padding[0], dilation[0])
    out_w = conv_output_size(in_w, kw, stride[1], padding[1], dilation[1])
    grad_input = grad_weight = None
    if needs[1]:
        grad_weight = dev.conv2d_grad_weight(input, grad_out, batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                             kh, kw, stride, padding, dilation, groups)
    grad_bias = _conv_grad_bias(dev, grad_out, batch, out_c, out_h, out_w, needs)
    if needs[0]:
        grad_input = dev.conv2d_grad_input(grad_out, weight, batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                           kh, kw, stride, padding, dilation, groups)
    return grad_input, grad_weight, grad_bias


@rule("conv_transpose2d")
def conv_transpose2d_backward(dev, grad_out, input, weight, batch: int, in_c: int, in_h: int, in_w: int,
                              out_c: int, kh: int, kw: int, stride=(1, 1), padding=(0, 0),
                              output_padding=(0, 0), dilation=(1, 1), groups: int = 1, needs=ALL3):
    """Gradients of conv_transpose2d for (input, weight, bias); pairs as in conv2d_backward.

    grad_out [batch, out_c, out_h, out_w] -> (d input [batch, in_c, in_h, in_w],
    d weight [in_c, out_c/groups, kh, kw], d bias [out_c]).

    conv_transpose2d is the input-gradient of a conv2d from out_c to in_c channels with
    the same weight, so its input gradient is that conv2d of grad_out, and its weight
    gradient is that conv2d's weight gradient with the roles of input and grad_out
    swapped. Where output_padding >= stride (allowed when dilation is larger) the conv2d
    reaches one row or column past in_h x in_w: the extra is cropped from d input and
    the input is zero-padded to match for d weight."""
    out_h = conv_transpose_output_size(in_h, kh, stride[0], padding[0], output_padding[0], dilation[0])
    out_w = conv_transpose_output_size(in_w, kw, stride[1], padding[1], output_padding[1], dilation[1])
    # The conv2d of an out_h x out_w map reaches back_h x back_w >= in_h x in_w.
    back_h = conv_output_size(out_h, kh, stride[0], padding[0], dilation[0])
    back_w = conv_output_size(out_w, kw, stride[1], padding[1], dilation[1])
    exact = (back_h, back_w) == (in_h, in_w)
    grad_input = grad_weight = None
    if needs[0]:
        grad_input = dev.conv2d(grad_out, weight, None, batch, out_c, out_h, out_w, in_c, kh, kw,
                                stride, padding, dilation, groups)
        if not exact:
            grad_input = dev.strided_gather(grad_input, (batch * in_c, in_h, in_w),
                                            (back_h * back_w, back_w, 1), 0)
    if needs[1]:
        x = input
        if not exact:
            x = dev.alloc(batch * in_c * back_h * back_w)
            dev.strided_scatter(input, x, (batch * in_c, in_h, in_w), (back_h * back_w, back_w, 1), 0)
        grad_weight = dev.conv2d_grad_weight(grad_out, x, batch, out_c, out_h, out_w, in_c, back_h, back_w,
                                             kh, kw, stride, padding, dilation, groups)
    return grad_input, grad_weight, _conv_grad_bias(dev, grad_out, batch, out_c, out_h, out_w, needs)


@rule("group_norm")
def group_norm_backward(dev, grad_out, x, gamma, batch: int, channels: int, spatial: int, groups: int,
                        eps: float = 1e-5, needs=ALL3):
    """Gradients of group_norm for (x, gamma, beta): one kernel computes all three."""
    grads = dev.group_norm_backward(grad_out, x, gamma, batch, channels, spatial, groups, eps)
    return tuple(grad if need else None for grad, need in zip(grads, needs))


@rule("layer_norm")
def layer_norm_backward(dev, grad_out, x, gamma, stats, rows: int, cols: int, needs=ALL3):
    """Gradients of layer_norm over the last `cols` of x [rows, cols] for (x, weight, bias)."""
    return dev.layer_norm_backward(grad_out, x, gamma, stats, rows, cols, want_affine=needs[1] or needs[2])


@rule("batch_norm")
def batch_norm_backward(dev, grad_out, x, mean, variance, gamma, batch: int, channels: int, spatial: int,
                        eps: float, training: bool):
    """Gradients of batch_norm for (input, weight, bias) (the statistics' own path included when training)."""
    return dev.batch_norm_backward(grad_out, x, mean, variance, gamma, batch, channels, spatial, eps, training)


@rule("max_pool2d")
def max_pool2d_backward(dev, grad_out, indices, *geometry):
    """out = max over each window; `indices` hold each output's arg position: grad_out routed there."""
    return (dev.max_pool2d_backward(grad_out, indices, *geometry),)


@rule("avg_pool2d")
def avg_pool2d_backward(dev, grad_out, *geometry):
    """out = the mean of each window: grad_out spread evenly over its window."""
    return (dev.avg_pool2d_backward(grad_out, *geometry),)


@rule("upsample_nearest2d")
def upsample_nearest2d_backward(dev, grad_out, *geometry):
    """out = each pixel repeated scale_h x scale_w times: the sum of its copies' gradients."""
    return (dev.upsample_nearest2d_backward(grad_out, *geometry),)


@rule("dropout")
def dropout_backward(dev, grad_out, p: float, seed: int):
    """out = x * mask / (1 - p) with the mask the seed regenerates: the same mask on grad_out."""
    return (dev.dropout(grad_out, p, seed),)


@rule("setitem")
def setitem_backward(dev, grad_out, shape, strides, offset: int):
    """out = x with its strided view (shape, strides, offset) replaced by value: grad_out with
    that view zeroed goes to x, the view of grad_out to value."""
    n_value = 1
    for size in shape:
        n_value *= size
    grad_x = dev.strided_scatter(dev.alloc(n_value), dev.copy(grad_out), shape, strides, offset)
    return grad_x, dev.strided_gather(grad_out, shape, strides, offset)


@rule("index_put")
def index_put_backward(dev, grad_out, positions, x_len: int):
    """out = x with the flat `positions` (i32) replaced by value: grad_out with those
    positions zeroed goes to x, grad_out at them to value."""
    n = positions.len
    grad_x = dev.index_put(dev.copy(grad_out), positions, dev.alloc(n))
    return grad_x, dev.gather_axis(grad_out, positions, 1, x_len, n, 1)


# ============================================================ sparse COO tensors (anygpu.sparse)

@rule("spmm")
def spmm_backward(dev, grad_out, values, dense, forward, transposed, out_rows: int, dense_rows: int, cols: int,
                  needs=BOTH):
    """out [out_rows, cols] = A @ X for a sparse A whose entries are listed by output row in
    `forward` and by dense row in `transposed` (each (ptr, perm, seg, other), ops/sparse.py),
    with `values` A's values and X = dense [dense_rows, cols] -> (d values, d X): each entry's
    d value = dot(dY[its row], X[its column]) (sddmm), d X = A^T dY."""
    ptr, perm, seg, other = forward
    grad_values = dev.sddmm(perm, seg, other, grad_out, dense, out_rows, dense_rows, cols) if needs[0] else None
    grad_dense = None
    if needs[1]:
        t_ptr, t_perm, _, t_other = transposed
        grad_dense = dev.spmm(t_ptr, t_perm, t_other, values, grad_out, dense_rows, out_rows, cols)
    return grad_values, grad_dense


@rule("segment_sum")
def segment_sum_backward(dev, grad_out, segment_of, segments: int, inner: int):
    """out [segments, inner] = the sum of each segment's entries (coalescing duplicates, a sparse
    sum over dims): each entry gets its segment's gradient (segment_of [entries], i32)."""
    return (dev.gather_axis(grad_out, segment_of, 1, segments, segment_of.len, inner),)


@rule("sparse_softmax")
def sparse_softmax_backward(dev, grad_out, y, ptr, perm, segments: int, inner: int):
    """y = softmax over the entries of each segment: y * (g - sum over the segment of g * y)."""
    return (dev.segment_softmax_backward(ptr, perm, y, grad_out, segments, inner),)


@rule("sparse_to_dense")
def sparse_to_dense_backward(dev, grad_out, positions, total: int):
    """out [total] = zeros with out[positions] = values (distinct positions): the gradient there."""
    return (dev.gather_axis(grad_out, positions, 1, total, positions.len, 1),)


@rule("sparse_gather")
def sparse_gather_backward(dev, grad_out, positions, total: int):
    """values = x.flatten()[positions] (to_sparse; distinct positions): the gradient scattered
    back into zeros of x's size."""
    return (dev.index_put(dev.alloc(total), positions, grad_out),)
