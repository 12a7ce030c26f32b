"""Tracing a forward: which op made each tensor, from what, with which arguments.

While `tracing(...)` is active, the public Tensor methods, the functions of
`anygpu.tensor`, `anygpu.nn.functional` and `anygpu.functions` (and every binding of them
that other modules, anygpu's and the user's, imported by name) are replaced by wrappers. A wrapper called
from user code (depth 0) with at least one *dynamic* argument (a tensor computed from the
graph inputs) does one of three things:

- the op has a mapping (`_mappings.METHODS` / `FUNCTIONS`): it runs the op itself one level
  deeper (so the op's own internal calls are not recorded), then the mapping emits the
  ONNX nodes and binds the result tensor to their output name;
- it is a known data-dependent read (`item`, `tolist`, `nonzero`, ...): export fails;
- otherwise it runs transparently at depth 0, so the mapped ops it is built from are
  recorded one by one (``F.mish`` becomes Softplus, Tanh, Mul); if a result still has no
  name afterwards, the op did work no mapping saw, and export fails naming it.

Arguments that are not dynamic (parameters, buffers, tensors made inside forward from
them) become initializers: parameters and buffers under their state-dict names, anything
else under a generated name (constant folding happens by construction). As a second
guard, float inputs are traced with requires_grad: a tensor that reaches a mapping
unnamed yet carries an autograd entry was computed from the inputs by some code path no
wrapper saw, and export fails naming that entry's op.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from .errors import UnsupportedOperatorError

if TYPE_CHECKING:  # the onnx package is imported by export only, not with anygpu
    from ._graph import Graph


def unsupported(op: str, why: str = "") -> UnsupportedOperatorError:
    detail = f": {why}" if why else ""
    return UnsupportedOperatorError(
        f"onnx.export: no ONNX mapping for op '{op}'{detail} (see anygpu/onnx/_mappings.py for the ops "
        f"that export)")


def tensors_in(value) -> Iterator[Any]:
    """Every Tensor inside value (nested tuples, lists and dicts)."""
    from ..tensor import Tensor
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


class Tracer:
    """The map from traced tensors to ONNX value names, and the graph they feed."""

    def __init__(self, graph: "Graph", named: dict[int, tuple[str, Any]], params_as_inputs: bool = False):
        self.graph = graph
        self.values: dict[int, str] = {}  # dynamic tensors (computed from the inputs) -> names
        self.consts: dict[int, str] = {}  # tensors made initializers -> names
        self.keep: list[Any] = []  # every tensor named here stays alive, so ids stay unique
        self.depth = 0
        self.named = named  # id(parameter or buffer) -> (state-dict name, tensor)
        self.params_as_inputs = params_as_inputs
        self.param_inputs: list[Any] = []

    # ---------------------------------------------------------------- naming values
    def dynamic(self, *values) -> bool:
        return any(id(t) in self.values for t in tensors_in(values))

    def bind(self, tensor, name: str, dynamic: bool = True) -> None:
        """tensor holds the value `name` (dynamic: computed from the inputs)."""
        (self.values if dynamic else self.consts)[id(tensor)] = name
        (self.consts if dynamic else self.values).pop(id(tensor), None)
        self.keep.append(tensor)

    def name(self, value, elem: int | None = None) -> str:
        """The ONNX name of a tensor (an initializer when it is not dynamic) or of a Python
        number / numpy array (a constant of element type `elem`)."""
        from ..tensor import Tensor
        from ._graph import elem_type
        if not isinstance(value, Tensor):
            array = np.asarray(value)
            if elem is None:
                raise TypeError(f"onnx.export: internal: no element type for constant {value!r}")
            return self.graph.const(array, elem)
        known = self.values.get(id(value), self.consts.get(id(value)))
        if known is not None:
            return known
        entry = value.grad_fn
        if value.requires_grad and entry is not None:
            raise unsupported(getattr(entry, "name", "?"), "a tensor computed from the inputs by a path "
                              "the tracer did not see")
        elem_of = elem_type(value.dtype)
        if id(value) in self.named:
            param_name = self.graph.claim(self.named[id(value)][0])
            if self.params_as_inputs:
                self.graph.types[param_name] = elem_of
                self.graph.inputs.append(self.graph.value_info(param_name, elem_of, value.shape))
                self.param_inputs.append(value)
            else:
                self.graph.initializer(param_name, value.numpy(), elem_of)
        else:
            param_name = self.graph.const(value.numpy(), elem_of)
        self.bind(value, param_name, dynamic=False)
        return param_name

    def check_named(self, out, label: str) -> None:
        """After a transparent op with dynamic arguments: each tensor it returned must have
        come from mapped ops (a constant here was computed from the inputs out of sight)."""
        for t in tensors_in(out):
            if id(t) not in self.values:
                raise unsupported(label.split(".")[-1], f"{label} computed a tensor from the inputs "
                                  f"that no mapped op produced")


# Tensor methods never wrapped: static facts about a tensor, autograd plumbing.
_EXEMPT = {
    "size", "dim", "numel", "ndimension", "nelement", "element_size", "is_floating_point", "is_contiguous",
    "get_device", "stride", "backward", "requires_grad_", "retain_grad", "register_hook", "is_cuda",
    "__repr__", "__format__", "__len__", "__iter__", "__contains__", "__hash__", "__init__", "__deepcopy__",
    "__reduce_ex__", "share_memory_", "pin_memory", "is_leaf", "grad_fn",
}
# Reads of a dynamic tensor's values on the host: the graph cannot depend on them.
DATA_DEPENDENT = {
    "numpy", "tolist", "item", "__bool__", "__float__", "__int__", "__index__", "__array__", "equal", "nonzero",
    "unique", "bincount", "masked_select", "histc", "apply_", "multinomial", "allclose", "isclose",
    "__setitem__", "setitem",
}
# Tensor dunders that are ops.
_DUNDERS = {
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
    "__pow__", "__rpow__", "__neg__", "__matmul__", "__rmatmul__", "__eq__", "__ne__", "__lt__", "__le__",
    "__gt__", "__ge__", "__abs__", "__getitem__", "__setitem__", "__iadd__", "__isub__", "__imul__",
    "__itruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__invert__", "__and__", "__or__",
    "__xor__", "__bool__", "__float__", "__int__", "__index__", "__array__",
}
# Private functions wrapped too: the primitives that public functions reach (in-place
# writes, unary kernels by name).
_PRIVATE = {"_unary", "_inplace"}
# Ops whose result may legitimately not depend on their dynamic argument's values.
_CONSTANT_OK = {"zeros_like", "ones_like", "full_like", "empty_like", "new_zeros", "new_ones", "new_full",
                "new_empty", "new_tensor", "rand_like", "randn_like", "randint_like"}


def _wrap(tracer: Tracer, original: Callable, label: str, handler: Callable | None) -> Callable:
    short = label.split(".")[-1]
    signature: list[inspect.Signature] = []

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if tracer.depth or not tracer.dynamic(args, kwargs):
            return original(*args, **kwargs)
        if short in DATA_DEPENDENT:
            raise unsupported(short, f"{label} reads the values of a tensor computed from the inputs "
                              f"(data-dependent, cannot be a graph)")
        if handler is None:
            out = original(*args, **kwargs)
            if short not in _CONSTANT_OK:
                tracer.check_named(out, label)
            return out
        if kwargs.get("out") is not None:
            raise unsupported(short, "out= (writes into an existing tensor)")
        kwargs.pop("out", None)
        tracer.depth += 1
        try:
            out = original(*args, **kwargs)
            if not signature:
                signature.append(inspect.signature(original))
            bound = signature[0].bind(*args, **kwargs)
            bound.apply_defaults()
            handler(tracer, out, bound.arguments)
        finally:
            tracer.depth -= 1
        return out

    return wrapper


@contextlib.contextmanager
def tracing(tracer: Tracer, methods: dict[str, Callable], functions: dict[str, Callable],
            namespaces: tuple[dict, ...] = ()):
    """Install the wrappers; restore every replaced attribute on exit. namespaces: further
    dicts whose values may be functions to wrap (the model's modules' attributes, such as a
    TransformerEncoderLayer's `activation = F.relu`)."""
    import importlib
    # anygpu.tensor (the attribute) is the tensor() factory; the package is in sys.modules.
    tensor_package = importlib.import_module("anygpu.tensor")
    torch_functions = importlib.import_module("anygpu.functions")
    functional = importlib.import_module("anygpu.nn.functional")
    Tensor = tensor_package.Tensor
    restore: list[tuple[Any, str, Any]] = []
    wrappers: dict[int, Callable] = {}
    originals: dict[int, Callable] = {}
    handlers: dict[int, Callable] = {}  # id(function) -> its mapping
    try:
        for name, value in list(vars(Tensor).items()):
            if not inspect.isfunction(value) or name in _EXEMPT:
                continue
            if name.startswith("_") and name not in _DUNDERS:
                continue
            restore.append((Tensor, name, value))
            setattr(Tensor, name, _wrap(tracer, value, f"Tensor.{name}", methods.get(name)))
        for module, prefix in ((tensor_package, "tensor"), (functional, "F"), (torch_functions, "torch")):
            for name, value in list(vars(module).items()):
                if not inspect.isfunction(value) or not getattr(value, "__module__", "").startswith("anygpu"):
                    continue
                if name.startswith("_") and name not in _PRIVATE:
                    continue
                if id(value) in wrappers:
                    continue
                handler = functions.get(f"{prefix}.{name}")
                inner = getattr(value, "__wrapped__", None)
                while handler is None and inner is not None:  # a decorator (functools.wraps) of a mapped op
                    handler = handlers.get(id(inner))
                    inner = getattr(inner, "__wrapped__", None)
                if handler is not None:
                    handlers[id(value)] = handler
                wrappers[id(value)] = _wrap(tracer, value, f"{prefix}.{name}", handler)
                originals[id(value)] = value
        # Every module's binding of a wrapped function: anygpu's own (`from ..tensor import cat`)
        # and the user's (`from torch.nn.functional import embedding` under the compat import).
        for module_name, module in list(sys.modules.items()):
            if module is None or module_name.startswith("anygpu.onnx"):
                continue
            try:
                names = list(vars(module).items())
            except TypeError:  # a module object without a __dict__
                continue
            for name, value in names:
                wrapper = wrappers.get(id(value))
                if wrapper is not None and originals[id(value)] is value:
                    restore.append((module, name, value))
                    setattr(module, name, wrapper)
        for namespace in namespaces:
            for name, value in list(namespace.items()):
                wrapper = wrappers.get(id(value))
                if wrapper is not None and originals[id(value)] is value:
                    restore.append((namespace, name, value))
                    namespace[name] = wrapper
        yield tracer
    finally:
        for owner, name, value in reversed(restore):
            if isinstance(owner, dict):
                owner[name] = value
            else:
                setattr(owner, name, value)
