"""torch-compat additions (see compat_common.py): METHODS for Tensor, FUNCTIONS for torch.*.

What torch's Tensor has beside the math: the in-place forms of addmm, baddbmm, cumsum,
cumprod, tril, triu and renorm; detach_; mvlgamma; the complex-number API as torch answers
it for real tensors (conj is self, imag an error, angle 0 or pi); is_cpu, retains_grad and
register_post_accumulate_grad_hook; hardshrink, prelu and bernoulli as methods.
All composed from the recorded Tensor ops, so autograd and dtypes come with them.
"""

from __future__ import annotations

import math
import weakref

from .. import dtypes
from .compat_common import method_function
from .core import RemovableHandle, Tensor, grad_ready_hooks
from .creation import zeros
from .elementwise import _cast
from .grad_mode import is_grad_enabled
from .indexing import where
from .inplace import _inplace

METHODS: dict = {}
FUNCTIONS: dict = {}


def _method(fn):
    """Register fn as Tensor.<fn.__name__>."""
    METHODS[fn.__name__] = fn
    return fn


def _property(fn):
    """Register fn as the read-only property Tensor.<fn.__name__>."""
    METHODS[fn.__name__] = property(fn, doc=fn.__doc__)
    return fn


# ------------------------------------------------------------------ in-place forms
@_method
def addmm_(self, mat1, mat2, *, beta=1, alpha=1):
    """self = beta * self + alpha * (mat1 @ mat2), in place."""
    return _inplace(self, self.addmm(mat1, mat2, beta=beta, alpha=alpha), "addmm_")


@_method
def baddbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    """self = beta * self + alpha * (batch1 @ batch2), in place (3-D)."""
    return _inplace(self, self.baddbmm(batch1, batch2, beta=beta, alpha=alpha), "baddbmm_")


def _own_copy(self: Tensor) -> Tensor:
    """self, or in a graph a clone of it: the value of an in-place op composed of several
    recorded ops, some saving their input (cumprod, renorm's norm, lgamma), is computed
    from the clone, so writing self afterwards changes nothing those ops saved."""
    return self.clone() if is_grad_enabled() and self.requires_grad else self


def _same_dtype(op: str, self: Tensor, dtype) -> None:
    """torch's in-place cumulative ops take dtype= only as self's own dtype."""
    if dtype is not None and dtypes.to_dtype(dtype, op) is not self.dtype:
        raise RuntimeError(f"Bad in-place call: input tensor dtype {self.dtype} and output tensor dtype "
                           f"{dtypes.to_dtype(dtype, op)} should match")


@_method
def cumsum_(self, dim: int, dtype=None):
    """self = self.cumsum(dim), in place (dtype=, if given, must be self's)."""
    _same_dtype("cumsum_", self, dtype)
    return _inplace(self, self.cumsum(dim), "cumsum_")


@_method
def cumprod_(self, dim: int, dtype=None):
    """self = self.cumprod(dim), in place (dtype=, if given, must be self's)."""
    _same_dtype("cumprod_", self, dtype)
    return _inplace(self, _own_copy(self).cumprod(dim), "cumprod_")


@_method
def tril_(self, diagonal: int = 0):
    return _inplace(self, self.tril(diagonal), "tril_")


@_method
def triu_(self, diagonal: int = 0):
    return _inplace(self, self.triu(diagonal), "triu_")


@_method
def renorm(self, p, dim: int, maxnorm):
    """Each sub-tensor self.select(dim, i) scaled to p-norm at most maxnorm: multiplied by
    maxnorm / (norm + 1e-7) where its norm exceeds maxnorm (torch's formula and epsilon),
    left as it is elsewhere. Differentiable through the norm, as torch's renorm_backward."""
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"renorm: expected a floating point tensor, got dtype {self.dtype}")
    p, maxnorm = float(p), float(maxnorm)
    if not p > 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if not maxnorm >= 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm:g}")
    if self.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {self.ndim} dimensions")
    if not -self.ndim <= dim < self.ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-self.ndim}, {self.ndim - 1}], "
                         f"but got {dim})")
    dim %= self.ndim
    norm = self.norm(p, tuple(d for d in range(self.ndim) if d != dim), keepdim=True)
    factor = where(norm > maxnorm, maxnorm / (norm + 1e-7), 1.0)
    return self * _cast(factor, self.dtype)


@_method
def renorm_(self, p, dim: int, maxnorm):
    return _inplace(self, _own_copy(self).renorm(p, dim, maxnorm), "renorm_")


@_method
def detach_(self):
    """Cut self from the graph in place: no grad_fn, requires_grad False. Returns self.
    A view in a graph is refused, as torch refuses views (anygpu's detach() results and
    slices outside any graph are let through: anygpu cannot tell them from torch's
    non-view detach())."""
    if self._base is not None and (self._entry is not None or self.requires_grad):
        raise RuntimeError("Can't detach views in-place. Use detach() instead.")
    self._entry, self._parents, self.requires_grad = None, (), False
    return self


# ------------------------------------------------------------------ special functions
@_method
def mvlgamma(self, p: int):
    """The multivariate log-gamma of dimension p: sum over i < p of lgamma(x - i/2), plus
    p (p - 1) / 4 log(pi); integer input computed in the default float dtype (as torch)."""
    if self.dtype is dtypes.bool:
        raise RuntimeError("The input tensor may not be a boolean tensor.")
    p = int(p)
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    x = self if self.dtype.is_floating_point else _cast(self, dtypes.default_float())
    total = x.lgamma()
    for i in range(1, p):
        total = total + (x - 0.5 * i).lgamma()
    return total + p * (p - 1) * math.log(math.pi) / 4


@_method
def mvlgamma_(self, p: int):
    return _inplace(self, _own_copy(self).mvlgamma(p), "mvlgamma_")


# ------------------------------------------------------------------ the complex API on real tensors
# anygpu has no complex dtypes: every tensor is real, and torch answers these for a real
# tensor with the tensor itself (conj, real), False (is_conj, is_neg) or an error (imag).
@_method
def conj(self):
    """self: a real tensor is its own conjugate (torch returns the same object)."""
    return self


@_method
def conj_physical(self):
    return self


@_method
def conj_physical_(self):
    return self


@_method
def resolve_conj(self):
    return self


@_method
def resolve_neg(self):
    return self


@_method
def is_conj(self) -> bool:
    return False


@_method
def is_neg(self) -> bool:
    return False


@_property
def real(self):
    """self, as torch's `.real` of a real tensor."""
    return self


@_property
def imag(self):
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


@_method
def angle(self):
    """The argument of each (real) element: pi for x < 0, 0 for x >= 0 (-0.0 and inf
    included), NaN kept; integer input gives the default float dtype. Its gradient is zero,
    as torch's for real input (NaN positions pass through x * 0, which carries no gradient)."""
    x = self if self.dtype.is_floating_point else _cast(self, dtypes.default_float())
    values = where(x < 0, math.pi, 0.0)
    return where(x != x, x * 0, _cast(values, x.dtype))


# ------------------------------------------------------------------ flags and autograd hooks
@_property
def is_cpu(self) -> bool:
    """False: every tensor lives on the adapter (its device is cuda, also for device="cpu";
    docs/PYTORCH.md, Devices), as is_cuda says True."""
    return False


@_property
def retains_grad(self) -> bool:
    """True for a non-leaf after retain_grad() (torch's retain_grad on a leaf changes nothing)."""
    return bool(self._retain) and self._entry is not None


# id(leaf) -> (weak reference to the leaf, {handle id: hook}); one dispatcher in core's
# grad_ready_hooks, added at the first registration, runs them after the leaf's .grad is written.
_post_accumulate_hooks: dict = {}


def _run_post_accumulate_hooks(leaf: Tensor) -> None:
    found = _post_accumulate_hooks.get(id(leaf))
    if found is None or found[0]() is not leaf:
        return
    for hook in tuple(found[1].values()):
        hook(leaf)


@_method
def register_post_accumulate_grad_hook(self, hook):
    """torch's Tensor.register_post_accumulate_grad_hook: hook(tensor) is called on a leaf
    after backward has accumulated its gradient into `.grad` (optimizer-in-backward). Returns
    a handle whose `remove()` takes the hook away."""
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self._entry is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    if not callable(hook):
        raise TypeError(f"register_post_accumulate_grad_hook: expected a callable, got {type(hook).__name__}")
    key = id(self)
    found = _post_accumulate_hooks.get(key)
    if found is None or found[0]() is not self:
        found = (weakref.ref(self, lambda _, key=key: _post_accumulate_hooks.pop(key, None)), {})
        _post_accumulate_hooks[key] = found
    handle = RemovableHandle(found[1])
    found[1][handle.id] = hook
    if _run_post_accumulate_hooks not in grad_ready_hooks:
        grad_ready_hooks.append(_run_post_accumulate_hooks)
    return handle


# ------------------------------------------------------------------ nn-style and random
@_method
def hardshrink(self, lambd=0.5):
    """x where |x| > lambd, 0 elsewhere; NaN kept (torch's: zero only inside [-lambd, lambd])."""
    inside = (self >= -lambd) & (self <= lambd)
    return where(inside, 0.0, self)


@_method
def prelu(self, weight):
    """nn.functional.prelu(self, weight)."""
    from ..nn import functional  # (nn sits above tensor: imported at the call)

    return functional.prelu(self, weight)


@_method
def bernoulli(self, p=None, generator=None):
    """1 with probability self (or p) per element, else 0, in self's dtype; the same draws as
    torch.bernoulli(self, p) from the same generator state."""
    probabilities = self if p is None else p
    return zeros(self.shape, dtype=self.dtype).bernoulli_(probabilities, generator=generator)


FUNCTIONS.update({name: method_function(name, out=False) for name in (
    "conj", "conj_physical", "resolve_conj", "resolve_neg", "is_conj", "is_neg", "prelu")})
FUNCTIONS.update({name: method_function(name) for name in ("renorm", "mvlgamma", "angle", "hardshrink")})
FUNCTIONS["real"] = lambda input: input.real
FUNCTIONS["imag"] = lambda input: input.imag
FUNCTIONS["real"].__name__ = "real"
FUNCTIONS["imag"].__name__ = "imag"
