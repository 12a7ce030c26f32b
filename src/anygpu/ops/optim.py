"""Fused optimizer updates (Layer 0): one kernel launch per parameter tensor.

Each op reads the gradient and updates the parameter and its optimizer state in
place (the buffers are bound read_write); scalars that depend on the step count
(bias corrections, the learning rate) come from the host through the uniform
parameters, so a step needs no read-back. Adam under a GradScaler keeps its step counts on
the GPU instead (adam_count_steps, adam_step_counted, adam_multi_step_counted: torch's
capturable Adam); anygpu.optim.Adam calls those directly: they are no Device methods, as
their Buffers are always the GPU's (GradScaler refuses float64 gradients).

Each update's uniforms are declared once below (a `Params`): the kernels' `struct Params`
(lib/optim_step.wgsl's {{PARAMS}}) is generated from it and `_update` packs the values by
name, so the two cannot drift apart."""

from __future__ import annotations

import functools
import struct

from ..runtime import Params, load_shader
from . import foreach
from ._common import check_buffer, grid_1d

__all__ = ["sgd_step", "adam_step", "adam_multi_step", "adadelta_step", "adagrad_step", "rmsprop_step", "nadam_step", "radam_step",
           "adamax_step", "rprop_step"]

# Every update: the element count and the gradient's sign (-1 when maximizing); `_update` fills both.
_STEP = ("n: u32", "grad_sign: f32")
# The L2 term added to the gradient (0 when the weight decay is decoupled).
_L2 = (*_STEP, "weight_decay: f32")
# The fields lib/adam_moments.wgsl reads (Adam, NAdam, RAdam); decay multiplies the parameter first.
_MOMENTS = (*_L2, "decay: f32", "beta1_weight: f32", "beta2: f32", "beta2_weight: f32", "eps: f32")

SGD_PARAMS = Params(*_L2, "lr: f32", "momentum: f32", "dampening_keep: f32", "nesterov: u32", "first: u32")
ADAM_PARAMS = Params(*_MOMENTS, "bias_correction2_sqrt: f32", "neg_step_size: f32", "slot: u32")
ADADELTA_PARAMS = Params(*_L2, "rho: f32", "rho_weight: f32", "eps: f32", "neg_lr: f32")
ADAGRAD_PARAMS = Params(*_L2, "eps: f32", "neg_clr: f32")
RMSPROP_PARAMS = Params(*_L2, "alpha: f32", "alpha_weight: f32", "eps: f32", "momentum: f32", "neg_lr: f32")
NADAM_PARAMS = Params(*_MOMENTS, "bias_correction2: f32", "grad_coef: f32", "avg_coef: f32")
RADAM_PARAMS = Params(*_MOMENTS, "bias_correction1: f32", "bias_correction2_sqrt: f32", "lr: f32", "rect: f32",
                      "rectified: u32")
ADAMAX_PARAMS = Params(*_L2, "beta1_weight: f32", "beta2: f32", "eps: f32", "neg_clr: f32")
# GradScaler's flag (optim_sgd.wgsl): the binding past every SGD variant's state, and the
# WGSL that reads it or, without a scaler, the constant functions in its place.
FOUND_INF_BINDING = 4
SKIP_NEVER = "fn skipped() -> bool { return false; }\nfn unset(v: f32) -> bool { return false; }"
UNSET = 0x7FA5CA1E   # a NaN no arithmetic makes: a momentum buffer no update has written yet
SKIP_ON_FLAG = (f"@group(0) @binding({FOUND_INF_BINDING}) var<storage, read_write> found_inf: array<u32>;\n"
                "fn skipped() -> bool { return found_inf[0] != 0u; }\n"
                f"fn unset(v: f32) -> bool {{ return bitcast<u32>(v) == {UNSET}u; }}")
RPROP_PARAMS = Params(*_STEP, "etaminus: f32", "etaplus: f32", "step_size_min: f32", "step_size_max: f32")


def _check_f32(op: str, **buffers) -> int:
    """Check every named buffer is an f32 Buffer of the first one's length; return it."""
    n = None
    first = None
    for name, buf in buffers.items():
        check_buffer(op, name, buf, n, f"len({first})" if first else "")
        if buf.dtype != "f32":
            raise ValueError(f"{op}: {name} must be a float32 buffer, got {buf.dtype}")
        if n is None:
            n, first = buf.len, name
    return n


@functools.lru_cache(maxsize=None)
def _source(shader: str, params: Params, **subs) -> str:
    """The text of kernels/`shader` with the struct of `params` (built once per variant:
    an update runs for every parameter tensor on every step)."""
    return load_shader(shader, **params.subs(), **subs)


def _unused(dev):
    """A one-word Buffer of `dev` for a binding slot a kernel variant leaves unused (one per device:
    a captured step sees the same Buffer each call)."""
    buf = dev.__dict__.get("_optim_unused_slot")
    if buf is None:
        buf = dev.__dict__["_optim_unused_slot"] = dev.alloc(1)
    return buf


def _update(dev, op: str, shader: str, params: Params, param, grad, state: dict, values: dict, *,
            maximize: bool, entry: str = "main", name: str | None = None, found_inf=None, extra=(),
            **subs) -> None:
    """One launch of kernels/`shader` (entry point `entry`, pipeline label `name`) over
    `param`, `grad` and the `state` buffers (all f32 of one length; grad is read, the
    others updated in place, bound in that order); `values` holds the uniforms of `params`
    other than n and grad_sign; `subs` fill the shader's other placeholders. found_inf (one
    u32, only for shaders with a FOUND_INF placeholder) is bound at FOUND_INF_BINDING, a slot
    before it that the variant leaves free holding a one-word Buffer the kernel does not use.
    `extra` Buffers (any dtype) are bound read_write after all of those."""
    n = _check_f32(op, param=param, grad=grad, **state)
    if n == 0:
        return
    outputs = [param, *state.values()]
    if found_inf is not None:
        if found_inf.dtype != "u32" or found_inf.len != 1:
            raise ValueError(f"{op}: found_inf must be one u32, got {found_inf.len} x {found_inf.dtype}")
        free = FOUND_INF_BINDING - 2 - len(outputs)   # outputs bind from 2 on
        outputs += [_unused(dev)] * min(free, 1) + [found_inf]
        if free > 1:
            raise ValueError(f"{op}: FOUND_INF_BINDING leaves {free} slots free, at most one is filled")
    outputs += extra
    kernel = dev.kernel(name or op.removesuffix("_step"), _source(shader, params, **subs), 1, len(outputs),
                        params.format(), entry_point=entry)
    values = {"n": n, "grad_sign": -1.0 if maximize else 1.0, **values}
    # WebGPU forbids binding one buffer read-only and read_write in the same dispatch.
    grad = dev.copy(grad) if grad._gpu is param._gpu else grad
    dev.launch(kernel, [grad], outputs, tuple(values[field] for field in params.names), grid_1d(dev, n))


def sgd_step(dev, param, grad, momentum_buf=None, *, lr: float, momentum: float = 0.0,
             dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
             first: bool = False, maximize: bool = False, found_inf=None) -> None:
    """One SGD update of `param` in place (torch.optim.SGD's rule; see optim_sgd.wgsl).

    momentum_buf: the momentum buffer (same length), updated in place; None for plain
    SGD. first=True on the step that creates it (it is then set to the gradient).
    found_inf: GradScaler's flag (one u32 Buffer): where it is nonzero nothing is written,
    and a momentum buffer whose elements hold the NaN `UNSET` is set to the gradient by the
    first update that runs (so one made on a skipped step starts as torch's would)."""
    state = {} if momentum_buf is None else {"momentum_buf": momentum_buf}
    entry = "sgd" if momentum_buf is None else "sgd_momentum"
    _update(dev, "sgd_step", "optim_sgd.wgsl", SGD_PARAMS, param, grad, state,
            dict(weight_decay=weight_decay, lr=lr, momentum=momentum, dampening_keep=1.0 - dampening,
                 nesterov=int(bool(nesterov)), first=int(bool(first))),
            maximize=maximize, entry=entry, name=entry, found_inf=found_inf,
            FOUND_INF=SKIP_NEVER if found_inf is None else SKIP_ON_FLAG)


def adam_step(dev, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq=None, *, step_size: float,
              beta1: float, beta2: float, eps: float, bias_correction2_sqrt: float,
              weight_decay: float = 0.0, decay: float = 1.0, maximize: bool = False) -> None:
    """One Adam/AdamW update of `param`, `exp_avg`, `exp_avg_sq` (and `max_exp_avg_sq`
    when given: amsgrad) in place, with torch.optim.Adam's rule (see optim_adam.wgsl).

    step_size = lr / (1 - beta1^t); bias_correction2_sqrt = sqrt(1 - beta2^t);
    weight_decay is Adam's L2 term added to the gradient; decay multiplies the
    parameter first (AdamW: 1 - lr * weight_decay)."""
    state = dict(exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)
    if max_exp_avg_sq is not None:
        state["max_exp_avg_sq"] = max_exp_avg_sq
    entry = "adam" if max_exp_avg_sq is None else "adam_amsgrad"
    _update(dev, "adam_step", "optim_adam.wgsl", ADAM_PARAMS, param, grad, state,
            dict(_moments(weight_decay, decay, beta1, beta2, eps), bias_correction2_sqrt=bias_correction2_sqrt,
                 neg_step_size=-step_size, slot=0),
            maximize=maximize, entry=entry, name=entry, STEPS=_HOST_SCALARS)


# ---------------------------------------------------------------- Adam's step counts on the GPU
#
# A `steps` Buffer (u32) holds STEP_WORDS words per parameter slot: the step count, whether the
# slot's last update was skipped (GradScaler's found_inf), and the bits of the two scalars of
# Adam's rule for the count (sqrt(1 - beta2^t), -lr / (1 - beta1^t)). adam_count_steps advances
# the counts and fills the rest (kernels/optim_adam_steps.wgsl); adam_step_counted and
# adam_multi_step_counted, launched after it, read a parameter's slot instead of host scalars.

STEP_WORDS = 4
_MASK_WORDS = 52   # the uniform slot's 64 words less the header
ADAM_STEPS_PARAMS = Params("count: u32", "base: u32", "zero: u32", "pad0: u32", "lr_hi: f32", "lr_lo: f32",
                           "beta1_hi: f32", "beta1_lo: f32", "beta2_hi: f32", "beta2_lo: f32", "pad1: u32", "pad2: u32",
                           f"mask: u32[{_MASK_WORDS}]")
_HOST_SCALARS = ("fn skipped() -> bool { return false; }\n"
                 "fn scalars() -> vec2<f32> { return vec2<f32>(P.bias_correction2_sqrt, P.neg_step_size); }")
_COUNTED_BINDING = 6   # optim_adam.wgsl's steps: after max_exp_avg_sq (binding 5)


def _counted_scalars(binding: int, slot: str) -> str:
    """WGSL reading skipped / scalars from the slot `slot` (an expression) of `steps` at `binding`."""
    return (f"@group(0) @binding({binding}) var<storage, read_write> steps: array<u32>;\n"
            f"fn skipped({'t: vec4<u32>' if 't.' in slot else ''}) -> bool "
            f"{{ return steps[{STEP_WORDS}u * {slot} + 1u] != 0u; }}\n"
            f"fn scalars({'t: vec4<u32>' if 't.' in slot else ''}) -> vec2<f32> {{ let at = {STEP_WORDS}u * {slot}; "
            "return vec2<f32>(bitcast<f32>(steps[at + 2u]), bitcast<f32>(steps[at + 3u])); }")


def _check_steps(op: str, steps, slots) -> None:
    if steps.dtype != "u32" or steps.len % STEP_WORDS:
        raise ValueError(f"{op}: steps must be a u32 buffer of {STEP_WORDS} words per slot, "
                         f"got {steps.len} x {steps.dtype}")
    for slot in slots:
        if not 0 <= int(slot) < steps.len // STEP_WORDS:
            raise ValueError(f"{op}: slot {slot} is out of range for {steps.len // STEP_WORDS} slots")


def _split(x: float) -> tuple[float, float]:
    """x as its float32 rounding and the float32 rounding of the rest (hi + lo)."""
    hi = float(struct.unpack("<f", struct.pack("<f", x))[0])
    return hi, float(struct.unpack("<f", struct.pack("<f", x - hi))[0])


def adam_count_steps(dev, steps, slots, *, lr: float, beta1: float, beta2: float, found_inf=None) -> None:
    """Advance the step count t of each slot of `steps` in `slots` by one and store Adam's
    scalars for it -- or, where the one-u32 Buffer found_inf is nonzero, keep t and mark the
    slot skipped (its update kernels then write nothing). The scalars are the host's
    float(sqrt(1 - beta2**t)) and float(-lr / (1 - beta1**t)) (computed from double lr and betas)."""
    _check_steps("adam_count_steps", steps, slots)
    if found_inf is not None and (found_inf.dtype != "u32" or found_inf.len != 1):
        raise ValueError(f"adam_count_steps: found_inf must be one u32, got {found_inf.len} x {found_inf.dtype}")
    if not 0.0 <= beta1 < 1.0 or not 0.0 <= beta2 < 1.0:
        raise ValueError(f"adam_count_steps: betas must be in [0, 1), got ({beta1}, {beta2})")
    ordered = sorted({int(s) for s in slots})
    flagged = found_inf is not None
    kernel = dev.kernel("adam_count_steps" + ("_found_inf" if flagged else ""), _steps_source(flagged),
                        int(flagged), 1, ADAM_STEPS_PARAMS.format())
    head = (*_split(float(lr)), *_split(float(beta1)), *_split(float(beta2)), 0, 0)
    window = 32 * _MASK_WORDS
    while ordered:
        base = ordered[0]
        part = [s for s in ordered if s < base + window]
        ordered = ordered[len(part):]
        mask = [0] * _MASK_WORDS
        for s in part:
            mask[(s - base) // 32] |= 1 << ((s - base) % 32)
        count = part[-1] - base + 1
        dev.launch(kernel, [found_inf] if flagged else [], [steps], (count, base, 0, 0, *head, *mask),
                   (-(-count // 64), 1, 1))


@functools.lru_cache(maxsize=None)
def _steps_source(flagged: bool) -> str:
    flag = ("@group(0) @binding(1) var<storage, read> found_inf: array<u32>;\n"
            "fn skipped() -> bool { return found_inf[0] != 0u; }") if flagged else \
        "fn skipped() -> bool { return false; }"
    return load_shader("optim_adam_steps.wgsl", **ADAM_STEPS_PARAMS.subs(), FOUND_INF=flag,
                       STEPS_BINDING=2 if flagged else 1)


def adam_step_counted(dev, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq=None, *, steps, slot: int,
                      beta1: float, beta2: float, eps: float, weight_decay: float = 0.0, decay: float = 1.0,
                      maximize: bool = False) -> None:
    """adam_step with its step-dependent scalars read from slot `slot` of `steps` (filled by
    adam_count_steps just before), writing nothing where that slot is marked skipped."""
    _check_steps("adam_step_counted", steps, [slot])
    state = dict(exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)
    if max_exp_avg_sq is not None:
        state["max_exp_avg_sq"] = max_exp_avg_sq
    entry = "adam" if max_exp_avg_sq is None else "adam_amsgrad"
    extra = (steps,) if max_exp_avg_sq is not None else (_unused(dev), steps)
    _update(dev, "adam_step_counted", "optim_adam.wgsl", ADAM_PARAMS, param, grad, state,
            dict(_moments(weight_decay, decay, beta1, beta2, eps), bias_correction2_sqrt=0.0, neg_step_size=0.0,
                 slot=int(slot)),
            maximize=maximize, entry=entry, name=entry + "_counted", extra=extra,
            STEPS=_counted_scalars(_COUNTED_BINDING, "P.slot"))


# Adam over several tensors per dispatch: the group's uniforms, then a vec4 per tensor (its
# length, first workgroup and the bits of its two step-dependent scalars).
_MULTI_SHARED = tuple(field.split(":")[0] for field in _MOMENTS[1:])   # grad_sign .. eps
_MULTI_HEAD = ("count: u32", "total_workgroups: u32", *_MOMENTS[1:], "pad0: u32", "pad1: u32", "pad2: u32")


@functools.lru_cache(maxsize=None)
def _adam_multi_params(count: int) -> Params:
    return Params(*_MULTI_HEAD, f"tensors: u32[{4 * count}]")


_MULTI_HOST_SCALARS = ("fn skipped(t: vec4<u32>) -> bool { return false; }\n"
                       "fn scalars(t: vec4<u32>) -> vec2<f32> { return vec2<f32>(bitcast<f32>(t.z), bitcast<f32>(t.w)); }")


@functools.lru_cache(maxsize=None)
def _adam_multi_source(count: int, amsgrad: bool, counted: bool = False) -> str:
    names = ("grad", "param", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
    code = foreach.arrays(names, count, 1, writable=names[1:], stubs=() if amsgrad else ("max_exp_avg_sq",))
    steps = _counted_scalars(1 + count * len(names), "t.z") if counted else _MULTI_HOST_SCALARS
    return load_shader("optim_adam_multi.wgsl", **_adam_multi_params(count).subs(), ARRAYS=code,
                       AMSGRAD="true" if amsgrad else "false", STEPS=steps)


_F32_BITS = struct.Struct("<f")
_U32 = struct.Struct("<I")


def _f32_bits(value: float) -> int:
    """The bits of value rounded to f32 (as a 'f' field of the parameter struct packs it)."""
    return _U32.unpack(_F32_BITS.pack(value))[0]


def adam_multi_step(dev, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs=None, *, step_sizes,
                    bias_correction2_sqrts, beta1: float, beta2: float, eps: float, weight_decay: float = 0.0,
                    decay: float = 1.0, maximize: bool = False) -> None:
    """adam_step over lists of tensors (one entry per parameter; step_sizes and
    bias_correction2_sqrts per parameter, the rest shared), several parameters per dispatch,
    with the same bits as adam_step on each. A gradient that is its parameter's Buffer is
    copied first, as adam_step does."""
    words = [(_f32_bits(b), _f32_bits(-s)) for b, s in zip(bias_correction2_sqrts, step_sizes)]
    _adam_multi(dev, "adam_multi_step", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                [("step_sizes", step_sizes), ("bias_correction2_sqrts", bias_correction2_sqrts)], words, None,
                beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, decay=decay, maximize=maximize)


def adam_multi_step_counted(dev, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs=None, *, steps, slots,
                            beta1: float, beta2: float, eps: float, weight_decay: float = 0.0, decay: float = 1.0,
                            maximize: bool = False) -> None:
    """adam_multi_step with each parameter's step-dependent scalars read from its slot of
    `steps` (`slots`, one per parameter, filled by adam_count_steps just before): the same
    bits as adam_step_counted on each; nothing is written for a slot marked skipped."""
    _check_steps("adam_multi_step_counted", steps, slots)
    _adam_multi(dev, "adam_multi_step_counted", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                [("slots", slots)], [(int(s), 0) for s in slots], steps, beta1=beta1, beta2=beta2, eps=eps,
                weight_decay=weight_decay, decay=decay, maximize=maximize)


def _adam_multi(dev, op: str, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, lists, words, steps, *,
                beta1: float, beta2: float, eps: float, weight_decay: float, decay: float, maximize: bool) -> None:
    """The multi-tensor launches: `words` holds each tensor's last two table words (the bits of
    its scalars, or its slot of `steps` when given); `lists` names further per-tensor lists to check."""
    state = [("params", params), ("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs), *lists]
    amsgrad = max_exp_avg_sqs is not None
    if amsgrad:
        state.append(("max_exp_avg_sqs", max_exp_avg_sqs))
    count = len(params)
    for name, values in state:
        if len(values) != count:
            raise ValueError(f"{op}: {name} has {len(values)} entries, params has {count}")
    tensors = []
    for i in range(count):
        buffers = dict(param=params[i], grad=grads[i], exp_avg=exp_avgs[i], exp_avg_sq=exp_avg_sqs[i])
        if amsgrad:
            buffers["max_exp_avg_sq"] = max_exp_avg_sqs[i]
        n = _check_f32(f"{op} (parameter {i})", **buffers)
        if n:
            tensors.append(i)
    counted = steps is not None
    per = foreach.per_dispatch(dev, 5 if amsgrad else 4, int(counted))
    shared = _moments(weight_decay, decay, beta1, beta2, eps) | {"grad_sign": -1.0 if maximize else 1.0}
    shared_values = tuple(shared[name] for name in _MULTI_SHARED)
    for part in foreach.groups(tensors, per):
        size = len(part)
        firsts, total = foreach.first_workgroups([params[i].len for i in part])
        table = []
        for i, first in zip(part, firsts):
            table += (params[i].len, first, *words[i])
        kernel = dev.kernel(f"adam_multi[{size}]" + ("_amsgrad" if amsgrad else "") + ("_counted" if counted else ""),
                            _adam_multi_source(size, amsgrad, counted), size,
                            size * (4 if amsgrad else 3) + int(counted), _adam_multi_params(size).format())
        # WebGPU forbids binding one buffer read-only and read_write in the same dispatch.
        inputs = [dev.copy(grads[i]) if grads[i]._gpu is params[i]._gpu else grads[i] for i in part]
        outputs = [params[i] for i in part] + [exp_avgs[i] for i in part] + [exp_avg_sqs[i] for i in part]
        if amsgrad:
            outputs += [max_exp_avg_sqs[i] for i in part]
        if counted:
            outputs.append(steps)
        dev.launch(kernel, inputs, outputs, (size, total, *shared_values, 0, 0, 0, *table), dev.grid(total))


def _moments(weight_decay: float, decay: float, beta1: float, beta2: float, eps: float) -> dict:
    """The values of lib/adam_moments.wgsl's uniforms (all of _MOMENTS but n and grad_sign)."""
    return dict(weight_decay=weight_decay, decay=decay, beta1_weight=1.0 - beta1, beta2=beta2,
                beta2_weight=1.0 - beta2, eps=eps)


def adadelta_step(dev, param, grad, square_avg, acc_delta, *, lr: float, rho: float, eps: float,
                  weight_decay: float = 0.0, maximize: bool = False) -> None:
    """One Adadelta update of `param`, `square_avg` and `acc_delta` in place
    (torch.optim.Adadelta's rule; see optim_adadelta.wgsl)."""
    _update(dev, "adadelta_step", "optim_adadelta.wgsl", ADADELTA_PARAMS, param, grad,
            dict(square_avg=square_avg, acc_delta=acc_delta),
            dict(weight_decay=weight_decay, rho=rho, rho_weight=1.0 - rho, eps=eps, neg_lr=-lr), maximize=maximize)


def adagrad_step(dev, param, grad, state_sum, *, clr: float, eps: float, weight_decay: float = 0.0,
                 maximize: bool = False) -> None:
    """One Adagrad update of `param` and `state_sum` in place (torch.optim.Adagrad's
    rule; see optim_adagrad.wgsl). clr = lr / (1 + (step - 1) * lr_decay)."""
    _update(dev, "adagrad_step", "optim_adagrad.wgsl", ADAGRAD_PARAMS, param, grad, dict(state_sum=state_sum),
            dict(weight_decay=weight_decay, eps=eps, neg_clr=-clr), maximize=maximize)


def rmsprop_step(dev, param, grad, square_avg, grad_avg=None, momentum_buf=None, *, lr: float, alpha: float,
                 eps: float, weight_decay: float = 0.0, momentum: float = 0.0, maximize: bool = False) -> None:
    """One RMSprop update of `param` and `square_avg` in place (torch.optim.RMSprop's
    rule; see optim_rmsprop.wgsl); `grad_avg` when centered, `momentum_buf` when
    momentum > 0, both updated in place too."""
    state = dict(square_avg=square_avg)
    entry = "rmsprop"
    if grad_avg is not None:
        state["grad_avg"] = grad_avg
        entry += "_centered"
    if momentum_buf is not None:
        state["momentum_buf"] = momentum_buf
        entry += "_momentum"
    # The variant's state follows square_avg (binding 3): grad_avg first when centered.
    centered = grad_avg is not None
    _update(dev, "rmsprop_step", "optim_rmsprop.wgsl", RMSPROP_PARAMS, param, grad, state,
            dict(weight_decay=weight_decay, alpha=alpha, alpha_weight=1.0 - alpha, eps=eps, momentum=momentum,
                 neg_lr=-lr),
            maximize=maximize, entry=entry, name=entry, GRAD_AVG_BINDING=4 if centered else 5,
            MOMENTUM_BINDING=5 if centered else 4)


def nadam_step(dev, param, grad, exp_avg, exp_avg_sq, *, beta1: float, beta2: float, eps: float,
               bias_correction2: float, grad_coef: float, avg_coef: float, weight_decay: float = 0.0,
               decay: float = 1.0, maximize: bool = False) -> None:
    """One NAdam update of `param`, `exp_avg` and `exp_avg_sq` in place (torch.optim.NAdam's
    rule; see optim_nadam.wgsl for grad_coef and avg_coef)."""
    _update(dev, "nadam_step", "optim_nadam.wgsl", NADAM_PARAMS, param, grad,
            dict(exp_avg=exp_avg, exp_avg_sq=exp_avg_sq),
            dict(_moments(weight_decay, decay, beta1, beta2, eps), bias_correction2=bias_correction2,
                 grad_coef=grad_coef, avg_coef=avg_coef),
            maximize=maximize)


def radam_step(dev, param, grad, exp_avg, exp_avg_sq, *, lr: float, beta1: float, beta2: float, eps: float,
               bias_correction1: float, bias_correction2_sqrt: float, rect: float | None,
               weight_decay: float = 0.0, decay: float = 1.0, maximize: bool = False) -> None:
    """One RAdam update of `param`, `exp_avg` and `exp_avg_sq` in place (torch.optim.RAdam's
    rule; see optim_radam.wgsl). rect=None: an unrectified (momentum-only) step."""
    _update(dev, "radam_step", "optim_radam.wgsl", RADAM_PARAMS, param, grad,
            dict(exp_avg=exp_avg, exp_avg_sq=exp_avg_sq),
            dict(_moments(weight_decay, decay, beta1, beta2, eps), bias_correction1=bias_correction1,
                 bias_correction2_sqrt=bias_correction2_sqrt, lr=lr, rect=0.0 if rect is None else rect,
                 rectified=int(rect is not None)),
            maximize=maximize)


def adamax_step(dev, param, grad, exp_avg, exp_inf, *, clr: float, beta1: float, beta2: float, eps: float,
                weight_decay: float = 0.0, maximize: bool = False) -> None:
    """One Adamax update of `param`, `exp_avg` and `exp_inf` in place (torch.optim.Adamax's
    rule; see optim_adamax.wgsl). clr = lr / (1 - beta1^t)."""
    _update(dev, "adamax_step", "optim_adamax.wgsl", ADAMAX_PARAMS, param, grad, dict(exp_avg=exp_avg, exp_inf=exp_inf),
            dict(weight_decay=weight_decay, beta1_weight=1.0 - beta1, beta2=beta2, eps=eps, neg_clr=-clr),
            maximize=maximize)


def rprop_step(dev, param, grad, prev, step_size, *, etaminus: float, etaplus: float, step_size_min: float,
               step_size_max: float, maximize: bool = False) -> None:
    """One Rprop update of `param`, `prev` and `step_size` in place (torch.optim.Rprop's
    rule; see optim_rprop.wgsl)."""
    _update(dev, "rprop_step", "optim_rprop.wgsl", RPROP_PARAMS, param, grad, dict(prev=prev, step_size=step_size),
            dict(etaminus=etaminus, etaplus=etaplus, step_size_min=step_size_min, step_size_max=step_size_max),
            maximize=maximize)
