"""Optimizers with torch.optim's names, defaults and update rules: SGD, Adam, AdamW.

Parameters and optimizer state stay on the GPU. A step launches one fused kernel
per parameter (ops/optim.py) that reads the gradient and updates the parameter and
its state buffers in place, so the Module holding the parameter sees the new values
and nothing is read back. Scalars that depend on the step (learning rate, bias
corrections) are computed on the host in double precision, as torch does -- except under a
GradScaler, where Adam/AdamW keep their step counts on the GPU (torch's capturable Adam) and a
kernel computes the same values from them, so a skipped step is decided on the GPU.

`state_dict()` has torch's layout: {"state": {index: {name: value}}, "param_groups":
[{..., "params": [index, ...]}]}, its values numpy-convertible (Tensors have
`.numpy()`). `flatten_state_dict` turns it into the flat name -> array dict that
`anygpu.save` writes; `load_state_dict` accepts either form (and torch's own).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..ops import optim as _optim_ops
from ..ops.optim import UNSET
from ..dtypes import float64
from ..tensor import Tensor, enable_grad, float32

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "flatten_state_dict", "unflatten_state_dict"]


def _host_array(value) -> np.ndarray:
    """numpy from an anygpu Tensor, a torch tensor, a numpy array or a number."""
    if isinstance(value, Tensor):
        return value.numpy()
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _plain(value):
    """A group hyperparameter as a Python value: 0-d arrays -> scalars, 1-d -> tuples."""
    if isinstance(value, Tensor) or hasattr(value, "detach") or isinstance(value, (np.ndarray, np.generic)):
        array = _host_array(value)
        return array.item() if array.ndim == 0 else tuple(array.tolist())
    return value


def _gpu_state(dev, values: np.ndarray, shape, dtype: str = "f32") -> Tensor:
    """A state Tensor on the GPU without a cached host copy (kernels update it in place);
    dtype "f64" for a float64 parameter's state (held on the host, ops/host64)."""
    if dtype == "f64":
        return Tensor(dev.upload(np.asarray(values, np.float64).reshape(-1), "f64"), shape)
    return Tensor(dev.upload(np.ascontiguousarray(values, np.float32).reshape(-1)), shape)


class Optimizer:
    """Base class: holds `param_groups` (dicts with "params" and hyperparameters,
    defaults filled in from `defaults`) and per-parameter `state`.

    Subclasses set `_state_tensors` (the names of their per-parameter GPU state)
    and implement `_step_group(group)`."""

    _state_tensors: tuple[str, ...] = ()
    _found_inf = None   # GradScaler's flag (a u32 Buffer) while it steps an optimizer that takes it

    def __init__(self, params, defaults: dict[str, Any]):
        self.defaults = dict(defaults)
        self.state: dict[Tensor, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            "but got a Tensor")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyperparameters (others from defaults)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        params = param_group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize anygpu Tensors, got {type(p).__name__}")
            if p.dtype != float32 and p.dtype is not float64:
                raise ValueError(f"optimizer can only optimize float32 or float64 tensors, got {p.dtype}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        if len({id(p) for p in params}) != len(params):
            raise ValueError("optimizer parameter group contains the same parameter more than once")
        existing = {id(p) for group in self.param_groups for p in group["params"]}
        if any(id(p) in existing for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        group = dict(param_group, params=params)
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (or zero it in place with set_to_none=False)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def step(self, closure=None):
        """Update every parameter that has a gradient. `closure` (optional) recomputes
        the loss (with gradients) and its value is returned."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        raise NotImplementedError

    @classmethod
    def _takes_found_inf(cls) -> bool:
        """Whether GradScaler may hand step() its found_inf flag (`_step_unless_found_inf`), the
        kernels then skipping the update on the GPU where it is set, instead of reading the flag
        back to decide: only where step is Optimizer's and _step_group is marked
        (`_skips_on_found_inf`); a subclass overriding either keeps the scaler's host check."""
        return cls.step is Optimizer.step and getattr(cls._step_group, "skips_on_found_inf", False)

    def _step_unless_found_inf(self, found_inf):
        """step(), every update skipped on the GPU where the one-u32 Buffer found_inf is nonzero."""
        self._found_inf = found_inf
        try:
            return self.step()
        finally:
            self._found_inf = None

    def _with_grads(self, group: dict[str, Any]):
        """(parameter, its checked gradient, its state dict) for each parameter of the group
        that has a gradient."""
        for p in group["params"]:
            if p.grad is None:
                continue
            grad = self._grad_of(p)
            yield p, grad, self.state.setdefault(p, {})

    @staticmethod
    def _grad_of(p: Tensor) -> Tensor:
        grad = p.grad
        if not isinstance(grad, Tensor):
            kind = f"{type(grad).__module__}.{type(grad).__name__}"
            raise TypeError(f"optimizer: a parameter's .grad must be an anygpu Tensor, got {kind}")
        if grad.shape != p.shape or grad.dtype is not p.dtype:
            raise ValueError(f"optimizer: gradient has shape {grad.shape} ({grad.dtype}), "
                             f"expected the parameter's {p.shape} ({p.dtype})")
        return grad

    # ------------------------------------------------------------------ state dicts

    def state_dict(self) -> dict[str, Any]:
        """torch's layout; state Tensors share the optimizer's GPU buffers (like torch's
        references): save or `.numpy()` them before the next step to keep a snapshot."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p not in self.state:
                    continue
                entry = {}
                for name, value in self.state[p].items():
                    if isinstance(value, Tensor):
                        entry[name] = Tensor(value._buf, value.shape)
                    elif name == "step":   # torch keeps a float32 tensor (read from the GPU if kept there)
                        entry[name] = np.array(int(value), dtype=np.float32)
                    elif value is not None:
                        entry[name] = value
                state[index[id(p)]] = entry
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore hyperparameters and state from `state_dict()` output, its flattened
        form (`flatten_state_dict`, e.g. from `anygpu.load`) or a torch optimizer's
        state dict. Everything is checked before anything changes."""
        if "state" not in state_dict and "param_groups" not in state_dict:
            state_dict = unflatten_state_dict(state_dict)
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(saved_groups)} parameter groups, "
                             f"this optimizer has {len(self.param_groups)}")
        for i, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(f"loaded state dict's parameter group {i} has {len(saved['params'])} "
                                 f"parameters, this optimizer's has {len(group['params'])}")
        by_index = {}
        for saved, group in zip(saved_groups, self.param_groups):
            for idx, p in zip(saved["params"], group["params"]):
                by_index[int(_plain(idx))] = p
        new_state: dict[Tensor, dict[str, Any]] = {}
        for idx, entry in state_dict["state"].items():
            idx = int(idx)
            if idx not in by_index:
                raise ValueError(f"loaded state dict has state for parameter {idx}, which no group lists")
            p = by_index[idx]
            restored = {}
            for name, value in entry.items():
                if value is None:
                    continue
                if name == "step":
                    restored[name] = int(round(float(_host_array(value))))
                elif name in self._state_tensors:
                    array = _host_array(value)
                    if array.size != p.numel():
                        raise ValueError(f"loaded state {name!r} of parameter {idx} has shape {array.shape}, "
                                         f"expected the parameter's {p.shape}")
                    restored[name] = array
                else:
                    restored[name] = _plain(value)
            new_state[p] = restored
        # Checked: now replace groups and state.
        for saved, group in zip(saved_groups, self.param_groups):
            for key, value in saved.items():
                if key != "params":
                    group[key] = _plain(value)
        self.state = {}
        for p, restored in new_state.items():
            for name, value in restored.items():
                if isinstance(value, np.ndarray):
                    restored[name] = _gpu_state(p._dev, value, p.shape, p._buf.dtype)
            self.state[p] = restored

    def __repr__(self) -> str:
        text = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}"
            for key in sorted(group):
                if key != "params":
                    text += f"\n    {key}: {group[key]}"
        return text + "\n)"


def _whole(t: Tensor) -> bool:
    """Whether t is all of its Buffer, in order (a kernel may then bind and write the Buffer)."""
    return t._base is None and t._view is None and t._buf.len == t.numel()


def _skips_on_found_inf(step_group):
    """Mark a _step_group that passes `self._found_inf` to every kernel it launches."""
    step_group.skips_on_found_inf = True
    return step_group


def _check_hyper(name: str, value: float) -> None:
    if not value >= 0.0:
        raise ValueError(f"Invalid {name}: {value}")


class SGD(Optimizer):
    """Stochastic gradient descent, torch.optim.SGD's rule:
    d = grad + weight_decay*p; buf = momentum*buf + (1-dampening)*d (buf = d on the first
    step); d = d + momentum*buf if nesterov else buf; p -= lr*d."""

    _state_tensors = ("momentum_buffer",)

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach=None, differentiable: bool = False, fused=None):
        _check_hyper("learning rate", lr)
        _check_hyper("momentum value", momentum)
        _check_hyper("weight_decay value", weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if differentiable:
            raise ValueError("SGD: differentiable=True is not supported")
        # foreach / fused are accepted for PyTorch code: every update here is one fused kernel.
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    @_skips_on_found_inf
    def _step_group(self, group: dict[str, Any]) -> None:
        momentum = float(group["momentum"])
        found_inf = self._found_inf
        for p, grad, state in self._with_grads(group):
            dev = p._dev
            buf = state.get("momentum_buffer")
            first = False
            if momentum != 0.0 and buf is None:
                if found_inf is None:
                    buf = Tensor(dev.empty(p.numel(), p._buf.dtype), p.shape)  # the kernel sets it to the gradient
                    first = True
                else:  # this update may be skipped: the first that runs sets it to the gradient
                    buf = _gpu_state(dev, np.full(p.numel(), UNSET, np.uint32).view(np.float32), p.shape)

            def update(dev=dev, p=p, grad=grad, buf=buf, first=first):
                dev.sgd_step(p._buf, grad._buf, buf._buf if momentum != 0.0 else None, lr=float(group["lr"]),
                             momentum=momentum, dampening=float(group["dampening"]),
                             weight_decay=float(group["weight_decay"]), nesterov=bool(group["nesterov"]),
                             first=first, maximize=bool(group["maximize"]), found_inf=found_inf)
                p._host = None  # the buffer changed under any cached host copy

            # A captured step (anygpu.compile) calls `update` again on each replay: the
            # group's current learning rate is used, as in an eager step.
            dev.dynamic(update)
            if momentum != 0.0:
                state["momentum_buffer"] = buf


class _DeviceStep:
    """A parameter's Adam step count kept on the GPU: word STEP_WORDS*slot of its group's steps
    Buffer (ops/optim.py adam_count_steps). Read back only when asked (int(), ==, state_dict)."""

    __slots__ = ("dev", "steps", "slot")

    def __init__(self, dev, steps, slot: int):
        self.dev, self.steps, self.slot = dev, steps, slot

    def __int__(self) -> int:
        return int(self.dev.read(self.steps)[_optim_ops.STEP_WORDS * self.slot])

    __index__ = __int__

    def __float__(self) -> float:
        return float(int(self))

    def __eq__(self, other) -> bool:
        return int(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{int(self)} (on the GPU)"


class Adam(Optimizer):
    """Adam, torch.optim.Adam's rule (bias corrections as torch computes them):
    g = grad + weight_decay*p (L2; AdamW decays p instead); m = lerp(m, g, 1-beta1);
    v = beta2*v + (1-beta2)*g^2; p -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps).
    amsgrad keeps max(v) over steps and uses it for v.

    Given GradScaler's found_inf flag (`_step_unless_found_inf`), the group's step counts move
    to the GPU for good (`_DeviceStep`; ops/optim.py adam_count_steps): the kernels skip where
    the flag is set, leaving parameters, moments and counts as they were, so the step reads
    nothing back and `anygpu.compile` replays it; the bias corrections are the host's bits."""

    _state_tensors = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None, decoupled_weight_decay: bool = False):
        _check_hyper("learning rate", lr)
        _check_hyper("epsilon value", eps)
        _check_hyper("weight_decay value", weight_decay)
        beta1, beta2 = betas
        if not 0.0 <= beta1 < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {beta1}")
        if not 0.0 <= beta2 < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {beta2}")
        if capturable or differentiable:
            raise ValueError(f"{type(self).__name__}: capturable and differentiable are not supported")
        # foreach=False: one kernel per parameter; otherwise (torch's foreach / fused) one
        # kernel updates several parameters (ops/optim.py's adam_multi_step), with the same bits.
        super().__init__(params, dict(lr=lr, betas=(float(beta1), float(beta2)), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
                                      decoupled_weight_decay=decoupled_weight_decay))
        self._foreach = foreach

    @_skips_on_found_inf
    def _step_group(self, group: dict[str, Any]) -> None:
        amsgrad = bool(group["amsgrad"])
        entries = []
        for p, grad, state in self._with_grads(group):
            dev = p._dev
            if "step" not in state:
                state["step"] = 0
                state["exp_avg"] = Tensor(dev.alloc(p.numel(), p._buf.dtype), p.shape)
                state["exp_avg_sq"] = Tensor(dev.alloc(p.numel(), p._buf.dtype), p.shape)
            if amsgrad and "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = Tensor(dev.alloc(p.numel(), p._buf.dtype), p.shape)
            entries.append((p, grad, state))
        # Under a GradScaler (found_inf) the step counts live on the GPU from then on (torch's
        # capturable Adam): the kernels skip where the flag is set and the counts stay right,
        # so nothing is read back. Otherwise the host counts (the bits of all earlier releases).
        if self._found_inf is not None or any(isinstance(s["step"], _DeviceStep) for _, _, s in entries):
            self._step_group_counted(group, entries)
            return
        many: dict[Any, list] = {}   # device -> (parameter, gradient, state) for the multi-tensor path
        for p, grad, state in entries:
            dev = p._dev
            if getattr(self, "_foreach", None) is not False and _whole(p) and _whole(grad):
                many.setdefault(dev, []).append((p, grad, state))
                continue
            # Replayed by a captured step (anygpu.compile): the step count and the group's
            # hyperparameters advance exactly as in an eager step.
            dev.dynamic(functools.partial(self._update, group, p, grad, state, dev))
        for dev, entries in many.items():
            dev.dynamic(functools.partial(self._update_many, group, entries, dev))

    def _steps_buffer(self, group: dict[str, Any], dev):
        """The group's steps Buffer on dev (ops/optim.py STEP_WORDS u32 per parameter of the
        group, slot = its index there), made once with the host counts the group has then."""
        known = self.__dict__.setdefault("_device_steps", {})
        key = (id(group), id(dev))
        held = known.get(key)
        if held is not None and held[0] is group and held[1] is dev:
            return held[2]
        words = np.zeros((len(group["params"]), _optim_ops.STEP_WORDS), np.uint32)
        for slot, p in enumerate(group["params"]):
            step = self.state.get(p, {}).get("step")
            if step is not None and not isinstance(step, _DeviceStep):
                words[slot, 0] = int(step)
        steps = dev.upload(words.reshape(-1), "u32")
        known[key] = (group, dev, steps)
        return steps

    def _step_group_counted(self, group: dict[str, Any], entries: list) -> None:
        """_step_group with the step counts on the GPU: per device one adam_count_steps, then
        the updates reading their slot (skipped there where found_inf is set)."""
        found_inf = self._found_inf
        slot_of = {id(p): slot for slot, p in enumerate(group["params"])}
        by_dev: dict[Any, list] = {}
        for p, grad, state in entries:
            dev = p._dev
            steps = self._steps_buffer(group, dev)
            slot = slot_of[id(p)]
            step = state["step"]
            if not (isinstance(step, _DeviceStep) and step.steps is steps and step.slot == slot):
                # A count kept on the host until now (or loaded by load_state_dict): into its slot.
                words = np.zeros(_optim_ops.STEP_WORDS, np.uint32)
                words[0] = int(step)
                dev.copy(dev.upload(words, "u32"), steps, dst_offset=_optim_ops.STEP_WORDS * slot)
                state["step"] = _DeviceStep(dev, steps, slot)
            by_dev.setdefault(dev, []).append((p, grad, state, slot))
        for dev, items in by_dev.items():
            # Replayed by a captured step (anygpu.compile) with the group's current hyperparameters.
            dev.dynamic(functools.partial(self._update_counted, group, items, dev, self._steps_buffer(group, dev),
                                          found_inf, getattr(self, "_foreach", None) is not False))

    @staticmethod
    def _update_counted(group: dict[str, Any], items: list, dev, steps, found_inf, foreach: bool) -> None:
        lr = float(group["lr"])
        beta1, beta2 = (float(b) for b in group["betas"])
        weight_decay = float(group["weight_decay"])
        decoupled = bool(group["decoupled_weight_decay"])
        amsgrad = bool(group["amsgrad"])
        _optim_ops.adam_count_steps(dev, steps, [slot for _, _, _, slot in items], lr=lr, beta1=beta1, beta2=beta2,
                                    found_inf=found_inf)
        rule = dict(beta1=beta1, beta2=beta2, eps=float(group["eps"]), weight_decay=0.0 if decoupled else weight_decay,
                    decay=1.0 - lr * weight_decay if decoupled else 1.0, maximize=bool(group["maximize"]))
        many = [item for item in items if foreach and _whole(item[0]) and _whole(item[1])]
        for p, grad, state, slot in items:
            if not (foreach and _whole(p) and _whole(grad)):
                _optim_ops.adam_step_counted(dev, p._buf, grad._buf, state["exp_avg"]._buf, state["exp_avg_sq"]._buf,
                                             state["max_exp_avg_sq"]._buf if amsgrad else None, steps=steps,
                                             slot=slot, **rule)
        if many:
            _optim_ops.adam_multi_step_counted(
                dev, [p._buf for p, _, _, _ in many], [g._buf for _, g, _, _ in many],
                [s["exp_avg"]._buf for _, _, s, _ in many], [s["exp_avg_sq"]._buf for _, _, s, _ in many],
                [s["max_exp_avg_sq"]._buf for _, _, s, _ in many] if amsgrad else None,
                steps=steps, slots=[slot for _, _, _, slot in many], **rule)
        for p, _, _, _ in items:
            p._host = None  # the buffer changed under any cached host copy

    @staticmethod
    def _update_many(group: dict[str, Any], entries: list, dev) -> None:
        """`_update` of several parameters, several per dispatch (ops/optim.py's adam_multi_step)."""
        lr = float(group["lr"])
        beta1, beta2 = (float(b) for b in group["betas"])
        weight_decay = float(group["weight_decay"])
        decoupled = bool(group["decoupled_weight_decay"])
        amsgrad = bool(group["amsgrad"])
        step_sizes, corrections = [], []
        last_step, step_size, correction = None, 0.0, 0.0
        for _, _, state in entries:
            state["step"] += 1
            step = state["step"]
            if step != last_step:  # the same scalars as _update computes, once per step count
                last_step, step_size, correction = step, lr / (1 - beta1 ** step), math.sqrt(1 - beta2 ** step)
            step_sizes.append(step_size)
            corrections.append(correction)
        dev.adam_multi_step([p._buf for p, _, _ in entries], [g._buf for _, g, _ in entries],
                            [s["exp_avg"]._buf for _, _, s in entries], [s["exp_avg_sq"]._buf for _, _, s in entries],
                            [s["max_exp_avg_sq"]._buf for _, _, s in entries] if amsgrad else None,
                            step_sizes=step_sizes, bias_correction2_sqrts=corrections, beta1=beta1, beta2=beta2,
                            eps=float(group["eps"]), weight_decay=0.0 if decoupled else weight_decay,
                            decay=1.0 - lr * weight_decay if decoupled else 1.0, maximize=bool(group["maximize"]))
        for p, _, _ in entries:
            p._host = None  # the buffer changed under any cached host copy

    @staticmethod
    def _update(group: dict[str, Any], p: Tensor, grad: Tensor, state: dict[str, Any], dev) -> None:
        lr = float(group["lr"])
        beta1, beta2 = (float(b) for b in group["betas"])
        weight_decay = float(group["weight_decay"])
        decoupled = bool(group["decoupled_weight_decay"])
        amsgrad = bool(group["amsgrad"])
        state["step"] += 1
        step = state["step"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        dev.adam_step(p._buf, grad._buf, state["exp_avg"]._buf, state["exp_avg_sq"]._buf,
                      state["max_exp_avg_sq"]._buf if amsgrad else None,
                      step_size=lr / bias_correction1, beta1=beta1, beta2=beta2, eps=float(group["eps"]),
                      bias_correction2_sqrt=math.sqrt(bias_correction2),
                      weight_decay=0.0 if decoupled else weight_decay,
                      decay=1.0 - lr * weight_decay if decoupled else 1.0,
                      maximize=bool(group["maximize"]))
        p._host = None  # the buffer changed under any cached host copy


class AdamW(Adam):
    """Adam with decoupled weight decay (torch.optim.AdamW): p *= 1 - lr*weight_decay
    before the Adam update, instead of adding weight_decay*p to the gradient."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, decoupled_weight_decay=True)


# ====================================================================== flat form for checkpoints

def flatten_state_dict(state_dict: dict[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    """An optimizer state dict as {name: numpy array}, e.g. for `anygpu.save`:
    "state.<index>.<name>" and "param_groups.<group>.<key>" (prefix prepended).
    None values are left out; `unflatten_state_dict` inverts it."""
    flat: dict[str, np.ndarray] = {}
    for idx, entry in state_dict["state"].items():
        for name, value in entry.items():
            if value is not None:
                flat[f"{prefix}state.{int(idx)}.{name}"] = _host_array(value)
    for g, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if value is None:
                continue
            array = np.asarray(list(value) if key == "params" else _plain(value))
            if key == "params":
                array = array.astype(np.int64)
            if array.dtype.kind not in "biuf":
                raise ValueError(f"flatten_state_dict: param_groups[{g}][{key!r}] = {value!r} is not numeric")
            flat[f"{prefix}param_groups.{g}.{key}"] = array
    return flat


def unflatten_state_dict(flat: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The inverse of `flatten_state_dict`: keys without `prefix` are ignored."""
    state: dict[int, dict[str, Any]] = {}
    groups: dict[int, dict[str, Any]] = {}
    for key, value in flat.items():
        if not key.startswith(prefix):
            continue
        parts = key[len(prefix):].split(".", 2)
        if len(parts) != 3 or parts[0] not in ("state", "param_groups") or not parts[1].isdigit():
            raise ValueError(f"unflatten_state_dict: unexpected key {key!r} "
                             "(expected state.<index>.<name> or param_groups.<group>.<key>)")
        kind, number, name = parts[0], int(parts[1]), parts[2]
        if kind == "state":
            state.setdefault(number, {})[name] = value
        elif name == "params":
            groups.setdefault(number, {})[name] = [int(i) for i in np.asarray(_host_array(value)).reshape(-1)]
        else:
            groups.setdefault(number, {})[name] = _plain(value)
    if sorted(groups) != list(range(len(groups))):
        raise ValueError(f"unflatten_state_dict: parameter groups {sorted(groups)} are not numbered 0..n-1")
    for g, group in groups.items():
        if "params" not in group:
            raise ValueError(f"unflatten_state_dict: parameter group {g} has no params entry")
    return {"state": state, "param_groups": [groups[g] for g in range(len(groups))]}
