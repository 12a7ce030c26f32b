"""GradScaler's unscale (Layer 0): several gradients divided by the scale in one dispatch,
with one flag noting an inf or NaN among them (torch's
_amp_foreach_non_finite_check_and_unscale_).

A kernel binds up to GROUP gradients (f32, written in place) and the flag; a thread takes
one element index and handles it in each gradient long enough to have it. The flag is one
u32 set with atomicOr where a result's exponent bits are all ones (inf or NaN: a bit test,
not a comparison, so no driver's NaN rules are involved)."""

from __future__ import annotations

import functools

import numpy as np

from ..runtime import Params
from ._common import WORKGROUP_1D, grid_1d

GROUP = 6   # gradients per dispatch: with the flag, 7 storage bindings (WebGPU's default limit is 8)


@functools.lru_cache(maxsize=None)
def _params(n: int) -> Params:
    return Params(*(f"n{i}: u32" for i in range(n)), "inverse: f32")


@functools.lru_cache(maxsize=None)
def _source(n: int) -> str:
    lines = [_params(n).wgsl(), "@group(0) @binding(0) var<uniform> P: Params;"]
    lines += [f"@group(0) @binding({i + 1}) var<storage, read_write> g{i}: array<f32>;" for i in range(n)]
    lines += [f"@group(0) @binding({n + 1}) var<storage, read_write> flag: array<atomic<u32>>;",
              f"@compute @workgroup_size({WORKGROUP_1D})",
              "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
              f"    let i = gid.x + gid.y * nwg.x * {WORKGROUP_1D}u;",
              "    var bad = false;"]
    for k in range(n):
        lines += [f"    if (i < P.n{k}) {{",
                  f"        let v = g{k}[i] * P.inverse;",
                  f"        g{k}[i] = v;",
                  "        bad = bad || (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u;",
                  "    }"]
    lines += ["    if (bad) { atomicOr(&flag[0], 1u); }", "}"]
    return "\n".join(lines) + "\n"


def unscale_check(dev, grads, inverse: float, flag=None):
    """Multiply each f32 Buffer of `grads` by `inverse` in place; return the u32 Buffer of
    one element (`flag`, or a new zeroed one) that is nonzero when a result is inf or NaN."""
    for i, g in enumerate(grads):
        if g.dtype != "f32":
            raise ValueError(f"unscale_check: gradient {i} must be f32, got {g.dtype}")
    if flag is None:
        flag = dev.upload(np.zeros(1, np.uint32))
    elif flag.dtype != "u32" or flag.len != 1:
        raise ValueError(f"unscale_check: flag must be one u32, got {flag.len} x {flag.dtype}")
    for start in range(0, len(grads), GROUP):
        part = [g for g in grads[start:start + GROUP] if g.len > 0]
        if not part:
            continue
        n = len(part)
        kernel = dev.kernel(f"unscale_check[{n}]", _source(n), 0, n + 1, _params(n).format("f32"))
        dev.launch(kernel, (), (*part, flag), (*(g.len for g in part), float(inverse)),
                   grid_1d(dev, max(g.len for g in part)))
    return flag
