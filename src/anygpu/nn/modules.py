"""ag.nn modules with torch.nn's names, arguments, parameter names and initialisation.

A `Module` registers the `Parameter`s, buffers and sub-modules assigned to its
attributes, so `named_parameters()` and `state_dict()` give torch's dotted keys
(`0.weight`, `bn.running_mean`) and a torch state dict loads with `load_state_dict`.
Forward passes call `anygpu.nn.functional`. Parameters live on the GPU; optimizers
update their buffers in place.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict, namedtuple
from typing import Iterable, Iterator

import numpy as np

from . import functional as F
from . import init
from .. import dtypes as _dtypes_mod
from ..ops import gpu
from ..tensor import Tensor, int32, ones, tensor, zeros

__all__ = [
    "Parameter", "Module", "Identity", "Linear", "Conv2d", "ConvTranspose2d", "GroupNorm", "LayerNorm",
    "BatchNorm2d", "Embedding", "Sequential", "ModuleList", "ReLU", "SiLU", "GELU", "Sigmoid", "Tanh",
    "Softmax", "Flatten", "Dropout", "MaxPool2d", "AvgPool2d", "Upsample", "MultiheadAttention", "MSELoss",
    "CrossEntropyLoss",
]

# Added to attention scores where a mask forbids attending: exp() of it underflows to
# exactly 0, as with torch's -inf, without relying on a driver's handling of infinities.
_MASKED_SCORE = -1e30


class Parameter(Tensor):
    """A Tensor that a Module registers as a learnable parameter (requires_grad=True).

    `Parameter(t)` shares t's GPU buffer; ops on a Parameter give plain Tensors."""

    __slots__ = ()

    def __init__(self, data=None, requires_grad: bool = True):
        if data is None:
            data = zeros(0)
        elif not isinstance(data, Tensor):
            data = tensor(data, dtype=_dtypes_mod.default_float())
        super().__init__(data._buf, data.shape, data.dtype)
        self._host = data._host
        self.requires_grad_(requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        return Parameter(_gpu_copy(self), self.requires_grad)


def _count(value: int) -> Tensor:
    """A 0-d int32 tensor (a step counter) that keeps its host copy: reading it needs no GPU sync."""
    host = np.array(value, dtype=np.int32)
    counter = Tensor(gpu().upload(host.reshape(1)), (), int32)
    counter._host = host
    return counter


def _gpu_copy(t: Tensor) -> Tensor:
    """A new Tensor with a copy of t's buffer (GPU to GPU)."""
    return Tensor(t._dev.copy(t._buf), t.shape, t.dtype)


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What `load_state_dict` returns: the keys it did not find and did not expect."""

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


class StateDictError(RuntimeError, ValueError):
    """A state dict that does not fit the module (torch raises RuntimeError; the rest
    of anygpu raises ValueError for bad input: this is both)."""


def _to_host_array(value) -> np.ndarray:
    """A numpy array from a state-dict value: numpy, anygpu Tensor, torch tensor, number, list."""
    if isinstance(value, Tensor):
        return value.numpy()
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu()
    if hasattr(value, "numpy") and not isinstance(value, (np.ndarray, np.generic)):
        value = value.numpy()
    return np.asarray(value)


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


class Module:
    """Base class of every layer: subclass it, assign Parameters and Modules in
    `__init__`, compute in `forward`. Calling the module calls `forward`."""

    training: bool
    # Buffers a state dict may omit (older torch checkpoints lack num_batches_tracked).
    _optional_buffers: tuple[str, ...] = ()

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())

    # ------------------------------------------------------------------ registration

    def _check_ready(self, what: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {what} before Module.__init__() call")

    def _check_name(self, kind: str, name) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if "." in name or name == "":
            raise KeyError(f"{kind} name can't contain '.' or be empty, got {name!r}")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or None: a declared but absent one, like a bias=False bias)."""
        self._check_ready("parameters")
        self._check_name("parameter", name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(anygpu.nn.Parameter or None required)")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        self._parameters[name] = param

    def register_buffer(self, name: str, value: Tensor | None, persistent: bool = True) -> None:
        """Add a buffer: state that is not learned (running_mean). persistent=False
        keeps it out of the state dict."""
        self._check_ready("buffers")
        self._check_name("buffer", name)
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"cannot assign '{type(value).__name__}' object to buffer '{name}' "
                            "(anygpu Tensor or None required)")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        self._buffers[name] = value
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        self._check_ready("modules")
        self._check_name("module", name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value) -> None:
        params = self.__dict__.get("_parameters")
        buffers = self.__dict__.get("_buffers")
        modules = self.__dict__.get("_modules")
        if isinstance(value, Parameter):
            self._check_ready("parameters")
            self.__dict__.pop(name, None)
            buffers.pop(name, None)
            modules.pop(name, None)
            self._non_persistent_buffers.discard(name)
            self._parameters[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(anygpu.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            self._check_ready("modules")
            self.__dict__.pop(name, None)
            params.pop(name, None)
            buffers.pop(name, None)
            self._non_persistent_buffers.discard(name)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(anygpu.nn.Module or None expected)")
            modules[name] = None
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(anygpu Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails: parameters, buffers, sub-modules.
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            values = d.get(store)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in ("_parameters", "_buffers", "_modules"):
            values = self.__dict__.get(store)
            if values is not None and name in values:
                del values[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    # ------------------------------------------------------------------ traversal

    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        """(dotted name, module) for this module ("") and every descendant, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, module in self.named_children():
            yield module

    def _named_members(self, store: str, prefix: str, recurse: bool, remove_duplicate: bool):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in getattr(module, store).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """(dotted name, Parameter) pairs, torch's names and order; shared ones once."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def get_submodule(self, target: str) -> "Module":
        module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no submodule {part!r} (looking up {target!r})")
            module = child
        return module

    def apply(self, fn) -> "Module":
        """Call fn on every sub-module, then on this one (e.g. custom initialisation)."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------------ state

    def _own_state(self, prefix: str, keep_vars: bool, out: OrderedDict) -> None:
        for name, param in self._parameters.items():
            if param is not None:
                out[prefix + name] = param if keep_vars else Tensor(param._buf, param.shape, param.dtype)
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers:
                out[prefix + name] = buf if keep_vars else Tensor(buf._buf, buf.shape, buf.dtype)
        for name, module in self._modules.items():
            if module is not None:
                module._own_state(f"{prefix}{name}.", keep_vars, out)

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False) -> OrderedDict:
        """Parameters and persistent buffers by torch's dotted keys.

        Values are Tensors on the same GPU buffers (they show later updates, as torch's
        do); `.numpy()` copies one to the host and `anygpu.save` writes the dict."""
        out = OrderedDict() if destination is None else destination
        self._own_state(prefix, keep_vars, out)
        return out

    def _optional_keys(self) -> set[str]:
        keys = set()
        for prefix, module in self.named_modules():
            for name in module._optional_buffers:
                keys.add(f"{prefix}.{name}" if prefix else name)
        return keys

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False) -> IncompatibleKeys:
        """Copy values (numpy arrays, anygpu Tensors or torch tensors) into this module's
        parameters and buffers, in place, by key.

        Every key is checked before anything is written: a shape mismatch raises
        StateDictError naming the key and both shapes; with strict=True so do missing
        or unexpected keys. Returns (missing_keys, unexpected_keys)."""
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"load_state_dict: expected a dict, got {type(state_dict).__name__}")
        own = self.state_dict(keep_vars=True)
        optional = self._optional_keys()
        missing = [k for k in own if k not in state_dict and k not in optional]
        unexpected = [k for k in state_dict if k not in own]
        errors, updates = [], []
        for key, target in own.items():
            if key not in state_dict:
                continue
            try:
                value = _to_host_array(state_dict[key])
            except (TypeError, ValueError) as exc:
                errors.append(f"could not read {key!r}: {exc}")
                continue
            if value.shape != target.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape {value.shape} from "
                              f"checkpoint, the shape in current model is {target.shape}.")
                continue
            if value.dtype.kind not in "biuf":
                errors.append(f"{key}: cannot load an array of dtype {value.dtype}")
                continue
            updates.append((target, value))
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        if errors:
            raise StateDictError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                                 + "\n\t".join(errors))
        for target, value in updates:
            host = np.ascontiguousarray(value, dtype=np.float64 if target.dtype is _dtypes_mod.float64 else
                                        np.float32 if target.dtype.is_floating_point else np.int32)
            target._dev.write(target._buf, host)
            # Integer buffers (step counters) keep a host copy: reading them costs no GPU sync.
            target._host = host.copy() if not target.dtype.is_floating_point else None
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------ modes, devices

    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (or zero it in place with set_to_none=False)."""
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad.zero_()

    def to(self, *args, **kwargs) -> "Module":
        """`model.to(device)`: parameters already live on the adapter; a device argument is
        checked like a tensor's (anygpu/placement.py). `model.to(dtype)` (or a tensor whose
        dtype to take): floating parameters and buffers are converted in place, as torch's."""
        from .. import placement
        from .. import dtypes as _dtypes
        dtype = kwargs.get("dtype")
        for arg in (*args, kwargs.get("device")):
            if isinstance(arg, _dtypes.dtype):
                dtype = arg
            elif isinstance(arg, Tensor):
                dtype = arg.dtype
            elif (isinstance(arg, placement.device) or (isinstance(arg, int) and not isinstance(arg, bool))
                    or (isinstance(arg, str) and arg.partition(":")[0] in placement.DEVICE_TYPES)):
                placement.check_device("Module.to", arg)
        if dtype is not None:
            self._convert_floating("Module.to", dtype)
        return self

    def _convert_floating(self, op: str, dtype) -> "Module":
        """Convert every floating parameter and buffer to `dtype` in place (the Parameter
        objects stay, so an optimizer built before still holds them)."""
        from .. import dtypes as _dtypes
        dtype = _dtypes.to_dtype(dtype, op)  # refuses bfloat16, naming the alternative
        if not dtype.is_floating_point:
            raise ValueError(f"{op}: expected a floating dtype for the parameters, got {dtype}")
        for held in (*self.parameters(), *self.buffers()):
            if held is not None and held.dtype.is_floating_point and held.dtype is not dtype:
                held.data = held.detach().to(dtype)
        return self

    def half(self) -> "Module":
        from .. import dtypes as _dtypes
        return self._convert_floating("Module.half", _dtypes.float16)

    def double(self) -> "Module":
        from .. import dtypes as _dtypes
        return self._convert_floating("Module.double", _dtypes.float64)

    def bfloat16(self) -> "Module":
        from .. import dtypes as _dtypes
        return self._convert_floating("Module.bfloat16", _dtypes.bfloat16)

    def cpu(self) -> "Module":
        return self

    def cuda(self, device=None) -> "Module":
        if device is not None:
            from .. import placement
            placement.check_device("Module.cuda", device)
        return self

    def float(self) -> "Module":
        from .. import dtypes as _dtypes
        return self._convert_floating("Module.float", _dtypes.float32)

    def __deepcopy__(self, memo):
        """A copy with its own GPU buffers (copied GPU to GPU), e.g. for an EMA model."""
        new = object.__new__(type(self))
        memo[id(self)] = new
        for store in ("_parameters", "_buffers"):
            for value in self.__dict__[store].values():
                if value is not None and id(value) not in memo:
                    memo[id(value)] = copy.deepcopy(value, memo) if isinstance(value, Parameter) \
                        else _gpu_copy(value)
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        return new

    # ------------------------------------------------------------------ calling, printing

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): {_addindent(repr(module), 2)}" for name, module in self._modules.items()]
        lines = extra_lines + child_lines
        text = type(self).__name__ + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                text += extra_lines[0]
            else:
                text += "\n  " + "\n  ".join(lines) + "\n"
        return text + ")"

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))


# ====================================================================== containers

class Sequential(Module):
    """Modules applied in order. `Sequential(a, b)` names them "0", "1";
    `Sequential(OrderedDict(name=module))` keeps the names."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], (dict, OrderedDict)):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for index, module in enumerate(args):
                self.add_module(str(index), module)

    def _index(self, idx: int) -> int:
        size = len(self)
        if not -size <= idx < size:
            raise IndexError(f"index {idx} is out of range for {type(self).__name__} of length {size}")
        return idx % size

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[self._index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules.keys())[self._index(idx)]
        self.add_module(key, module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules.keys())
        for key in (keys[idx] if isinstance(idx, slice) else [keys[self._index(idx)]]):
            del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules registered as children "0", "1", ... (no forward of its own)."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, idx: int) -> int:
        size = len(self)
        if not -size <= idx < size:
            raise IndexError(f"index {idx} is out of range for ModuleList of length {size}")
        return idx % size

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[str(self._index(idx))]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(self._index(idx)), module)

    def __delitem__(self, idx) -> None:
        remaining = list(self._modules.values())
        del remaining[idx if isinstance(idx, slice) else self._index(idx)]
        self._modules.clear()
        self.extend(remaining)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        self.extend(items)

    def pop(self, index: int = -1) -> Module:
        module = self[index]
        del self[index]
        return module

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        return ModuleList(list(self) + list(other))


# ====================================================================== layers

def _pair(value, name: str = "value") -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name} must be an int or a pair, got {value!r}")
        return int(value[0]), int(value[1])
    return int(value), int(value)


class Identity(Module):
    """Returns its input (any arguments to the constructor are ignored, as in torch)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


def _reset_like_torch(weight, bias) -> None:
    """Linear and convolution initialisation as in torch: kaiming_uniform_(a=sqrt(5)) for
    the weight, uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)


class Linear(Module):
    """y = x W^T + b. Input (*, in_features) -> (*, out_features).

    weight (out_features, in_features) ~ kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in));
    bias (out_features,) ~ U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.weight = Parameter(zeros(self.out_features, self.in_features))
        if bias:
            self.bias = Parameter(zeros(self.out_features))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_like_torch(self.weight, self.bias)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class _ConvNd(Module):
    _quote_padding = True  # repr of a string padding: 'same' (Conv1d prints it unquoted, as torch does)

    def _init_conv(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                   padding_mode, transposed, output_padding=0, tuple_of=_pair):
        """The layer's sizes as tuple_of makes them (_pair: 2-d; nn.layers1d._single: 1-d)."""
        name = type(self).__name__
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"{name}: only padding_mode='zeros' is supported, got {padding_mode!r}")
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = tuple_of(kernel_size, "kernel_size")
        self.stride = tuple_of(stride, "stride")
        if isinstance(padding, str):
            if padding not in ("same", "valid") or transposed:
                raise ValueError(f"{name}: padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
            self.padding = padding
        else:
            self.padding = tuple_of(padding, "padding")
        self.dilation = tuple_of(dilation, "dilation")
        self.output_padding = tuple_of(output_padding, "output_padding")
        self.groups = int(groups)
        self.padding_mode = padding_mode
        if transposed:
            shape = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
        else:
            shape = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
        self.weight = Parameter(zeros(*shape))
        if bias:
            self.bias = Parameter(zeros(self.out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_like_torch(self.weight, self.bias)

    def extra_repr(self) -> str:
        zeros_, ones = (0,) * len(self.kernel_size), (1,) * len(self.kernel_size)
        text = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != zeros_:
            quoted = isinstance(self.padding, str) and self._quote_padding
            text += f", padding={self.padding!r}" if quoted else f", padding={self.padding}"
        if self.dilation != ones:
            text += f", dilation={self.dilation}"
        if self.output_padding != zeros_:
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text


class Conv2d(_ConvNd):
    """2-D convolution. Input (N, C_in, H, W) -> (N, C_out, H_out, W_out).

    weight (C_out, C_in/groups, kh, kw) and bias (C_out,) ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    fan_in = C_in/groups*kh*kw (torch's kaiming_uniform(a=sqrt(5)))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__()
        self._init_conv(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, transposed=False)

    def forward(self, input):
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose2d(_ConvNd):
    """Transposed 2-D convolution. Input (N, C_in, H, W) -> (N, C_out, H_out, W_out),
    H_out = (H-1)*stride - 2*padding + dilation*(kh-1) + output_padding + 1.

    weight (C_in, C_out/groups, kh, kw) (torch's layout); fan_in = C_out/groups*kh*kw, as torch."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None):
        super().__init__()
        self._init_conv(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, transposed=True, output_padding=output_padding)

    def forward(self, input):
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class _Norm(Module):
    def _affine_parameters(self, affine: bool, bias: bool, shape: tuple[int, ...]) -> None:
        """weight = 1 (and bias = 0 unless bias=False) of `shape` when affine, else None."""
        self.register_parameter("weight", Parameter(ones(*shape)) if affine else None)
        self.register_parameter("bias", Parameter(zeros(*shape)) if affine and bias else None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)


class GroupNorm(_Norm):
    """Group normalisation over (N, C, *): weight (C,) = 1, bias (C,) = 0 when affine
    (no bias with bias=False)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups = int(num_groups)
        self.num_channels = int(num_channels)
        self.eps = eps
        self.affine = affine
        self._affine_parameters(affine, bias, (self.num_channels,))

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class LayerNorm(_Norm):
    """Layer normalisation over the trailing `normalized_shape` dims; weight = 1, bias = 0."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self._affine_parameters(elementwise_affine, bias, self.normalized_shape)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class BatchNorm2d(_Norm):
    """Batch normalisation over (N, C, H, W) per channel.

    Training: normalises with the batch's statistics and updates running_mean and
    running_var (unbiased) with `momentum` (None: a cumulative average), counting
    num_batches_tracked. Eval: uses the running statistics."""

    _optional_buffers = ("num_batches_tracked",)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        self.num_features = int(num_features)
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self._affine_parameters(affine, bias, (self.num_features,))
        if track_running_stats:
            self.register_buffer("running_mean", zeros(self.num_features))
            self.register_buffer("running_var", ones(self.num_features))
            self.register_buffer("num_batches_tracked", _count(0))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            self.num_batches_tracked = _count(0)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        super().reset_parameters()

    def _check_input_dim(self, input) -> None:
        if input.ndim != 4:
            raise ValueError(f"BatchNorm2d: expected 4D input (N, C, H, W), got {input.ndim}D input "
                             f"of shape {tuple(input.shape)}")

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            count = int(self.num_batches_tracked.item()) + 1  # a host copy: no GPU sync
            self.num_batches_tracked = _count(count)
            if self.momentum is None:
                factor = 1.0 / count
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch_stats, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class Embedding(Module):
    """A lookup table: integer indices (*) -> (*, embedding_dim). weight ~ N(0, 1);
    the padding_idx row is zero and gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm=None, norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False,
                 _weight=None, _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise ValueError("Embedding: max_norm, scale_grad_by_freq and sparse are not supported")
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within num_embeddings "
                                 f"({self.num_embeddings})")
            padding_idx %= self.num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(zeros(self.num_embeddings, self.embedding_dim), requires_grad=not _freeze)
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight, requires_grad=not _freeze)
            if self.weight.shape != (self.num_embeddings, self.embedding_dim):
                raise ValueError(f"Embedding: _weight has shape {self.weight.shape}, expected "
                                 f"{(self.num_embeddings, self.embedding_dim)}")

    def reset_parameters(self) -> None:
        values = np.asarray(init.default_generator().standard_normal(self.weight.shape), np.float32)
        if self.padding_idx is not None:
            values[self.padding_idx] = 0.0
        init._write(self.weight, values)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None) -> "Embedding":
        weight = embeddings if isinstance(embeddings, Tensor) else tensor(_to_host_array(embeddings))
        rows, cols = weight.shape
        return cls(rows, cols, padding_idx=padding_idx, _weight=weight, _freeze=freeze)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        return text


# ====================================================================== stateless layers

class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace  # accepted for PyTorch code; the result is always a new tensor

    def forward(self, input):
        return F.relu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class SiLU(Module):
    """x * sigmoid(x)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.silu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """x * Phi(x); approximate='tanh' for the tanh approximation."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    def forward(self, input):
        return F.sigmoid(input)


class Tanh(Module):
    def forward(self, input):
        return F.tanh(input)


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmax(input, dim=-1 if self.dim is None else self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Flatten(Module):
    """Flattens dims start_dim..end_dim: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Dropout(Module):
    """Zeroes elements with probability p in training (scaling the rest by 1/(1-p));
    the identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be between 0 and 1, got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_MaxPoolNd):
    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average (N, C, H, W) down to `output_size` (an int or (h, w); ResNet heads use 1)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class Upsample(Module):
    """Resize (N, C, *spatial) by `scale_factor` or to `size` (F.interpolate's modes)."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
        super().__init__()
        self.size = size
        self.scale_factor = scale_factor
        self.mode = mode
        self.align_corners = align_corners

    def forward(self, input):
        return F.interpolate(input, size=self.size, scale_factor=self.scale_factor, mode=self.mode,
                             align_corners=self.align_corners)

    def extra_repr(self) -> str:
        how = f"scale_factor={self.scale_factor}" if self.scale_factor is not None else f"size={self.size}"
        return f"{how}, mode={self.mode!r}"


def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """torch's deprecated size_average / reduce flags, turned into a reduction."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


class MSELoss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input, target):
        return F.mse_loss(input, target, reduction=self.reduction)


class CrossEntropyLoss(Module):
    """Cross entropy of logits (N, C) against class indices (N,)."""

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__()
        # A buffer, as in torch: it appears in the state dict as "weight".
        self.register_buffer("weight", weight if weight is None or isinstance(weight, Tensor) else tensor(weight))
        self.ignore_index = ignore_index
        self.reduction = _legacy_reduction(size_average, reduce, reduction)
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        # Only arguments away from their defaults are passed on.
        options = {}
        if self.weight is not None:
            options["weight"] = self.weight
        if self.ignore_index != -100:
            options["ignore_index"] = self.ignore_index
        if self.label_smoothing:
            options["label_smoothing"] = self.label_smoothing
        return F.cross_entropy(input, target, reduction=self.reduction, **options)


# ====================================================================== attention

def _additive_mask(mask, what: str) -> Tensor | None:
    """A float mask to add to attention scores. Boolean masks (numpy/torch bool arrays,
    or int32 anygpu tensors) mark with True the positions NOT to attend to, as torch's
    MultiheadAttention (integer numpy/torch arrays: nonzero is True); float masks are
    added as they are."""
    if mask is None:
        return None
    if isinstance(mask, Tensor):
        if not mask.dtype.is_floating_point:  # bool or integer: True / nonzero = masked
            return (mask != 0) * _MASKED_SCORE
        return mask
    values = _to_host_array(mask)
    if values.dtype.kind in "biu":
        values = np.where(values != 0, np.float32(_MASKED_SCORE), np.float32(0.0))
    elif values.dtype.kind != "f":
        raise ValueError(f"MultiheadAttention: {what} must be a bool or float mask, got dtype {values.dtype}")
    return tensor(values.astype(np.float32))


class MultiheadAttention(Module):
    """Multi-head attention with torch's parameters (in_proj_weight (3E, E), in_proj_bias
    (3E,), out_proj.weight (E, E), out_proj.bias (E,); q/k/v_proj_weight when kdim or
    vdim differ from embed_dim), so a torch state dict loads.

    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights or None).
    Shapes: query (L, N, E), key/value (S, N, E); (N, L, E)/(N, S, E) with batch_first;
    unbatched (L, E) too. Output like query; weights (N, L, S) averaged over heads, or
    (N, H, L, S). Masks: attn_mask (L, S) or (N*H, L, S), key_padding_mask (N, S); a bool
    mask is True where attending is NOT allowed, a float mask is added to the scores."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        if add_bias_kv or add_zero_attn:
            raise ValueError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim = int(embed_dim)
        self.kdim = int(kdim) if kdim is not None else self.embed_dim
        self.vdim = int(vdim) if vdim is not None else self.embed_dim
        self._qkv_same_embed_dim = self.kdim == self.embed_dim and self.vdim == self.embed_dim
        self.num_heads = int(num_heads)
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = self.embed_dim // self.num_heads
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(zeros(3 * e, e))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(zeros(e, e))
            self.k_proj_weight = Parameter(zeros(e, self.kdim))
            self.v_proj_weight = Parameter(zeros(e, self.vdim))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * e))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(e, e, bias=bias)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def _project(self, query, key, value, self_attention: bool):
        e = self.embed_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        bias = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim and self_attention:
            qkv = F.linear(query, w, b)
            return qkv[..., :e], qkv[..., e:2 * e], qkv[..., 2 * e:]
        if self._qkv_same_embed_dim:
            weights = (w[:e], w[e:2 * e], w[2 * e:])
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        return tuple(F.linear(x, wx, bx) for x, wx, bx in zip((query, key, value), weights, bias))

    def _mask(self, attn_mask, key_padding_mask, is_causal: bool, n: int, l: int, s: int):
        """One additive mask broadcastable to (N, H, L, S), or None."""
        h = self.num_heads
        mask = _additive_mask(attn_mask, "attn_mask")
        if mask is None and is_causal:
            mask = tensor(np.triu(np.full((l, s), _MASKED_SCORE, np.float32), k=1))
        if mask is not None:
            if mask.shape == (l, s):
                mask = mask.reshape(1, 1, l, s)
            elif mask.shape == (n * h, l, s):
                mask = mask.reshape(n, h, l, s)
            else:
                raise ValueError(f"MultiheadAttention: attn_mask has shape {mask.shape}, expected "
                                 f"(L, S) = {(l, s)} or (N*num_heads, L, S) = {(n * h, l, s)}")
        padding = _additive_mask(key_padding_mask, "key_padding_mask")
        if padding is not None:
            if padding.shape != (n, s):
                raise ValueError(f"MultiheadAttention: key_padding_mask has shape {padding.shape}, "
                                 f"expected (N, S) = {(n, s)}")
            padding = padding.reshape(n, 1, 1, s)
            mask = padding if mask is None else mask + padding
        return mask

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                average_attn_weights: bool = True, is_causal: bool = False):
        self_attention = query is key and key is value
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"MultiheadAttention: query, key and value must all be 3-D (batched) or 2-D, "
                             f"got shapes {query.shape}, {key.shape}, {value.shape}")
        if not batched:  # (L, E) -> a batch of one
            query, key, value = (x.unsqueeze(0) for x in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0) if isinstance(key_padding_mask, Tensor) \
                    else _to_host_array(key_padding_mask)[None]
        elif not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        if self_attention:
            key = value = query
        n, l, e = query.shape
        s = key.shape[1]
        if e != self.embed_dim:
            raise ValueError(f"MultiheadAttention: query has embedding size {e}, expected {self.embed_dim}")
        if key.shape[0] != n or value.shape[:2] != key.shape[:2]:
            raise ValueError(f"MultiheadAttention: key {key.shape} and value {value.shape} do not match "
                             f"query {query.shape} in batch and source length")
        h, d = self.num_heads, self.head_dim
        q, k, v = self._project(query, key, value, self_attention)
        q = q.reshape(n, l, h, d).permute(0, 2, 1, 3)  # (N, H, L, D)
        k = k.reshape(n, s, h, d).permute(0, 2, 1, 3)
        v = v.reshape(n, s, h, d).permute(0, 2, 1, 3)
        mask = self._mask(attn_mask, key_padding_mask, is_causal, n, l, s)
        dropout_p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q * (1.0 / math.sqrt(d))) @ k.transpose(-2, -1)  # (N, H, L, S)
            if mask is not None:
                scores = scores + mask
            weights = F.softmax(scores, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, dropout_p, True)
            out = weights @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        out = out.permute(0, 2, 1, 3).reshape(n, l, e)
        out = self.out_proj(out)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            out = out.squeeze(0)
            weights = weights.squeeze(0) if weights is not None else None
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self) -> str:
        return ""
