"""Products: matmul (float and integer), einsum, cdist."""

from __future__ import annotations



from ..autograd.rules import backward as rule
from ..dtypes import int64, promote
from ..ops import gpu
from ..ops.nd import broadcast_shapes, numel

from .core import Tensor, _is_int
from .recording import _record
from .creation import linked_empty, zeros
from .elementwise import _autocast, _to_tensor
from .views import expand


def _matmul_int(a: Tensor, b: Tensor, m: int, n: int, k: int) -> Tensor:
    """Exact integer matmul of (batched) matrices; mixing integer and float operands is an
    error, as in torch."""
    if not (_is_int(a.dtype) and _is_int(b.dtype)):
        raise ValueError(f"matmul: both operands must have the same kind of dtype, got {a.dtype} and {b.dtype} "
                         f"(convert one with .float() or .long())")
    batch_shape = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    a_full = a if a.shape[:-2] == batch_shape else expand(a, batch_shape + (m, k))
    b_full = b if b.shape[:-2] == batch_shape else expand(b, batch_shape + (k, n))
    dtype = promote(a.dtype, b.dtype)
    buf = gpu().matmul_int(a_full._buf, b_full._buf, numel(batch_shape), m, n, k, check=dtype is int64)
    return Tensor(buf, batch_shape + (m, n), dtype)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul: 1-D/2-D/batched with broadcast batch dims (float16 operands: f16
    stored, summed in f32, as are their gradients)."""
    a, b = _autocast("matmul", _to_tensor(a), _to_tensor(b))
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: both arguments need at least 1 dimension")
    if a.ndim == 1 and b.ndim == 1:
        return matmul(a.unsqueeze(0), b.unsqueeze(-1)).reshape(())
    if a.ndim == 1:
        return matmul(a.unsqueeze(0), b).squeeze(-2)
    if b.ndim == 1:
        return matmul(a, b.unsqueeze(-1)).squeeze(-1)
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied ({k} != {k2})")
    if not (a.dtype.is_floating_point and b.dtype.is_floating_point):
        return _matmul_int(a, b, m, n, k)
    if a.dtype is not b.dtype:
        raise ValueError(f"matmul: expected both operands to have the same dtype, got {a.dtype} and {b.dtype}")
    if 0 in a.shape or 0 in b.shape:  # empty products: an empty result, or zeros when k == 0
        out_shape = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2]) + (m, n)
        return linked_empty(zeros(out_shape) if numel(out_shape) else Tensor(gpu().empty(0), out_shape), a, b)
    dev = gpu()
    if b.ndim == 2:
        batch_shape = a.shape[:-2]
        rows = numel(batch_shape) * m
        a_buf, b_buf = a._buf, b._buf  # (read once: a strided view gathers on each read)
        out = Tensor(dev.matmul_strided(a_buf, b_buf, 1, rows, n, k), batch_shape + (m, n))

        return _record("matmul", out, (a, b),
                       rule("matmul", dev, a_buf, b_buf, rows, n, k, (a.requires_grad, b.requires_grad)))
    batch_shape = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    a_full = a if a.shape[:-2] == batch_shape else expand(a, batch_shape + (m, k))
    b_full = b if b.shape[:-2] == batch_shape else expand(b, batch_shape + (k, n))
    batch = numel(batch_shape)
    a_buf, b_buf = a_full._buf, b_full._buf
    out = Tensor(dev.matmul_strided(a_buf, b_buf, batch, m, n, k), batch_shape + (m, n))

    return _record("bmm", out, (a_full, b_full), rule("bmm", dev, a_buf, b_buf, batch, m, n, k,
                                                       (a_full.requires_grad, b_full.requires_grad)))


def einsum(equation: str, *operands) -> Tensor:
    """torch.einsum for explicit or implicit outputs, one letter per dim, no repeated
    letters within an operand: pairs are contracted by one (batched) matmul each."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise ValueError(f"einsum: the equation names {len(inputs)} operands, got {len(operands)}")
    if "." in equation:
        raise ValueError("einsum: ellipsis ('...') is not supported; name every dim")
    for spec, t in zip(inputs, operands):
        if len(spec) != t.ndim or len(set(spec)) != len(spec):
            raise ValueError(f"einsum: operand spec {spec!r} does not name each of the {t.ndim} dims "
                             f"of shape {t.shape} exactly once")
    if not arrow:
        counts = {c: lhs.count(c) for c in lhs if c != ","}
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    current, spec = operands[0], inputs[0]
    for k in range(1, len(operands)):
        later = set(rhs) | set("".join(inputs[k + 1:]))
        current, spec = _einsum_pair(current, spec, operands[k], inputs[k], later)
    summed = [i for i, c in enumerate(spec) if c not in rhs]
    if summed:
        current = current.sum(tuple(summed))
        spec = "".join(c for c in spec if c in rhs)
    if sorted(spec) != sorted(rhs):
        raise ValueError(f"einsum: output {rhs!r} names dims that no operand has")
    return current.permute(tuple(spec.index(c) for c in rhs)) if spec != rhs else current


def _einsum_pair(a: Tensor, sa: str, b: Tensor, sb: str, keep: set) -> tuple[Tensor, str]:
    """Contract two operands: dims both have and `keep` needs are batch dims, dims both have
    that nothing later needs are summed by the matmul; the rest stay."""
    a, sa = _sum_own(a, sa, sb, keep)
    b, sb = _sum_own(b, sb, sa, keep)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    size = {c: n for s, t in ((sa, a), (sb, b)) for c, n in zip(s, t.shape)}
    for c in batch + contract:
        if dict(zip(sa, a.shape))[c] != dict(zip(sb, b.shape))[c]:
            raise ValueError(f"einsum: dim {c!r} has size {dict(zip(sa, a.shape))[c]} in one operand and "
                             f"{dict(zip(sb, b.shape))[c]} in the other")
    a3 = a.permute(tuple(sa.index(c) for c in batch + left + contract)).reshape(
        (numel(size[c] for c in batch), numel(size[c] for c in left), numel(size[c] for c in contract)))
    b3 = b.permute(tuple(sb.index(c) for c in batch + contract + right)).reshape(
        (numel(size[c] for c in batch), numel(size[c] for c in contract), numel(size[c] for c in right)))
    out = matmul(a3, b3).reshape(tuple(size[c] for c in batch + left + right))
    return out, "".join(batch + left + right)


def _sum_own(t: Tensor, spec: str, other: str, keep: set) -> tuple[Tensor, str]:
    """Sum the dims only this operand has and nothing later needs."""
    own = [i for i, c in enumerate(spec) if c not in keep and c not in other]
    if not own:
        return t, spec
    return t.sum(tuple(own)), "".join(c for i, c in enumerate(spec) if i not in own)


def _scaled_sum(input, product: Tensor, beta, alpha) -> Tensor:
    """beta * input + alpha * product (addmm / baddbmm)."""
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return scaled
    return scaled + (input if beta == 1 else _to_tensor(input) * beta)


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0) -> Tensor:
    """Pairwise p-norm distances between the rows of x1 [.., P, M] and x2 [.., R, M]."""
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return diff.norm(p, dim=-1)
