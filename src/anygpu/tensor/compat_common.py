"""What the torch-compat modules (compat_math, compat_reduce, compat_shape) share: each
defines METHODS (name -> function, attached to Tensor by tensor/__init__.py) and FUNCTIONS
(name -> function, torch.<name> at the package's top level, functions.py); neither may
replace a name that exists already (checked where they are attached)."""

from __future__ import annotations

from .outputs import with_out


def method_function(name: str, out: bool = True):
    """torch.<name>(input, *args, **kwargs) as input.<name>(*args, **kwargs), with torch's
    out= where torch has it (out=False for views, predicates and the like)."""
    from .core import Tensor
    from .elementwise import _to_tensor

    def fn(input, *args, **kwargs):
        if not isinstance(input, Tensor):
            input = _to_tensor(input)
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"torch.{name}(input, ...): the same as input.{name}(...)."
    return with_out(name, fn) if out else fn


def attach(cls, methods: dict) -> None:
    """Put `methods` on cls; a name cls has already is an error (a compat module must not
    shadow an implementation)."""
    for name, fn in methods.items():
        if hasattr(cls, name):
            raise AttributeError(f"compat: Tensor.{name} exists already; remove it from METHODS")
        setattr(cls, name, fn)
