"""GradScaler's device work (Layer 0): several gradients divided by the scale in one dispatch,
with one flag noting an inf or NaN among them (torch's _amp_foreach_non_finite_check_and_unscale_),
and the scale's update from those flags (torch's _amp_update_scale_).

The unscale is a multi-tensor kernel (ops/foreach.py's layout, kernels/amp_unscale.wgsl):
each gradient's workgroups follow the previous one's, four elements a thread, up to
foreach.MAX_TENSORS gradients a dispatch (so one for a small model), and one u32 flag set
with atomicOr where a result's exponent bits are all ones.

The scale can stay on the GPU (`scale=`: a one-element f32 Buffer): the kernel then takes
its reciprocal itself, correctly rounded as torch's `scale.double().reciprocal().float()`
(kernels/lib/exact_f32.wgsl), so a step reads nothing back and can be replayed."""

from __future__ import annotations

import functools

import numpy as np

from ..runtime import Params, load_shader
from . import foreach


@functools.lru_cache(maxsize=None)
def _unscale_params(count: int, host_inverse: bool) -> Params:
    return Params("count: u32", "total_workgroups: u32", "inverse: f32" if host_inverse else "pad0: u32",
                  "pad1: u32", f"tensors: u32[{4 * count}]")


@functools.lru_cache(maxsize=None)
def _unscale_source(count: int, host_inverse: bool) -> str:
    scale = "" if host_inverse else \
        f"@group(0) @binding({count + 2}) var<storage, read_write> scale: array<f32>;"
    return load_shader("amp_unscale.wgsl", **_unscale_params(count, host_inverse).subs(),
                       ARRAYS=foreach.arrays(("g",), count, 1, ("g",)), FLAG_BINDING=count + 1, SCALE=scale,
                       INVERSE="P.inverse" if host_inverse else "reciprocal(scale[0])")


def _check_one(op: str, name: str, buf, dtype: str) -> None:
    if buf.dtype != dtype or buf.len != 1:
        raise ValueError(f"{op}: {name} must be one {dtype}, got {buf.len} x {buf.dtype}")


def unscale_check(dev, grads, inverse: float | None = None, flag=None, scale=None):
    """Multiply each f32 Buffer of `grads` in place by `inverse`, or by the reciprocal of the
    one-element f32 Buffer `scale` (read on the GPU); return the u32 Buffer of one element
    (`flag`, or a new zeroed one) that is nonzero when a result is inf or NaN."""
    if (inverse is None) == (scale is None):
        raise ValueError("unscale_check: give exactly one of inverse (a number) and scale (a Buffer)")
    if scale is not None:
        _check_one("unscale_check", "scale", scale, "f32")
    for i, g in enumerate(grads):
        if g.dtype != "f32":
            raise ValueError(f"unscale_check: gradient {i} must be f32, got {g.dtype}")
    if len({id(g._gpu) for g in grads}) != len(grads):
        raise ValueError("unscale_check: a Buffer is listed twice (it would be unscaled twice)")
    if flag is None:
        flag = dev.upload(np.zeros(1, np.uint32))
    else:
        _check_one("unscale_check", "flag", flag, "u32")
    host_inverse = scale is None
    live = [g for g in grads if g.len]
    for part in foreach.groups(live, foreach.per_dispatch(dev, 1, 1 + (not host_inverse))):
        count = len(part)
        table, total = foreach.unit_table([g.len for g in part])   # four elements a thread
        params = _unscale_params(count, host_inverse)
        kernel = dev.kernel(f"unscale_check[{count}]", _unscale_source(count, host_inverse), 0,
                            count + 1 + (not host_inverse), params.format())
        header = (count, total, float(inverse) if host_inverse else 0, 0)
        dev.launch(kernel, (), (*part, flag, *([] if host_inverse else [scale])), (*header, *table),
                   dev.grid(total))
    return flag


UPDATE_PARAMS = Params("growth_hi: f32", "growth_lo: f32", "backoff_hi: f32", "backoff_lo: f32",
                       "growth_interval: i32")
FLAGS = 6   # found_inf flags one update reads (with the scale and the tracker, 8 storage bindings)


@functools.lru_cache(maxsize=None)
def _update_source(n: int) -> str:
    bindings = "\n".join(f"@group(0) @binding({k + 1}) var<storage, read> flag{k}: array<u32>;" for k in range(n))
    return load_shader("amp_update_scale.wgsl", **UPDATE_PARAMS.subs(), FLAG_BINDINGS=bindings,
                       SCALE_BINDING=n + 1, TRACKER_BINDING=n + 2,
                       ANY_FLAG=" || ".join(f"flag{k}[0] != 0u" for k in range(n)))


@functools.lru_cache(maxsize=None)
def _merge_source(n: int) -> str:
    lines = [Params("unused: u32").wgsl(), "@group(0) @binding(0) var<uniform> P: Params;"]
    lines += [f"@group(0) @binding({k + 1}) var<storage, read> flag{k}: array<u32>;" for k in range(n)]
    lines += [f"@group(0) @binding({n + 1}) var<storage, read_write> merged: array<u32>;",
              "@compute @workgroup_size(1)",
              "fn main() {",
              "    merged[0] = select(0u, 1u, " + " || ".join(f"flag{k}[0] != 0u" for k in range(n)) + ");",
              "}"]
    return "\n".join(lines) + "\n"


def _split_double(x: float) -> tuple[float, float]:
    """x as the sum of its float32 rounding and the float32 rounding of the rest."""
    hi = float(np.float32(x))
    return hi, float(np.float32(x - hi))


def update_scale(dev, scale, growth_tracker, flags, *, growth_factor: float, backoff_factor: float,
                 growth_interval: int) -> None:
    """torch's _amp_update_scale_ on the GPU, in place: when any u32 Buffer of `flags` is
    nonzero, scale *= backoff_factor and growth_tracker = 0; else growth_tracker += 1, and on
    reaching growth_interval scale *= growth_factor (kept only if finite) and growth_tracker = 0.
    scale: one f32 (products rounded once from double, as torch's); growth_tracker: one i32."""
    _check_one("update_scale", "scale", scale, "f32")
    _check_one("update_scale", "growth_tracker", growth_tracker, "i32")
    if not flags:
        raise ValueError("update_scale: no found_inf flags (call unscale_check first)")
    for k, f in enumerate(flags):
        _check_one("update_scale", f"flags[{k}]", f, "u32")
    flags = list(flags)
    while len(flags) > FLAGS:   # more optimizers than bindings: fold the first ones into one flag
        merged = dev.empty(1, "u32")
        kernel = dev.kernel(f"merge_flags[{FLAGS}]", _merge_source(FLAGS), FLAGS, 1, Params("unused: u32").format())
        dev.launch(kernel, flags[:FLAGS], (merged,), (0,), (1, 1, 1))
        flags = [merged, *flags[FLAGS:]]
    n = len(flags)
    kernel = dev.kernel(f"update_scale[{n}]", _update_source(n), n, 2, UPDATE_PARAMS.format())
    values = dict(zip(("growth_hi", "growth_lo"), _split_double(growth_factor)))
    values.update(zip(("backoff_hi", "backoff_lo"), _split_double(backoff_factor)))
    values["growth_interval"] = int(growth_interval)
    dev.launch(kernel, flags, (scale, growth_tracker), tuple(values[f] for f in UPDATE_PARAMS.names), (1, 1, 1))
