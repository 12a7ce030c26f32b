"""Multi-tensor ops (Layer 0): one dispatch works on several tensors, each its own Buffer, as
torch's _foreach_* kernels do: clip_grad_norm_'s sums of squares and its in-place scaling,
and f32 <-> f16 conversions (autocast's float16 copies of a model's weights). The
multi-tensor Adam (ops/optim.py's adam_multi_step) and GradScaler's unscale (ops/scaler.py)
use the same helpers.

A kernel of this family binds up to `per_dispatch` tensors (bounded by the adapter's
max-storage-buffers-per-shader-stage and by the uniform slot, which holds one vec4 per
tensor); WGSL cannot index bindings, so `arrays` generates each binding's declaration and a
`<name>_load(k, i)` / `<name>_store(k, i, value)` pair that switches on the tensor k (the
same k for a whole workgroup: a uniform branch). The tensors' workgroups lie one after the
other in a 1-D grid; `first_workgroups` lays them out (`unit_table` for the kernels that take
four elements a thread: the scaling, the casts and GradScaler's unscale)."""

from __future__ import annotations

import functools

from ..runtime import Params, load_shader
from ._common import WORKGROUP_1D, check_buffer

__all__ = ["sum_squares", "scale_by", "cast_many"]

MAX_TENSORS = 12   # per dispatch: a vec4 of the 64-word uniform slot per tensor, beside a header
_CHUNK = 4096      # reduce.py's _CHUNK: elements one workgroup sums
_SHORT = 64        # reduce.py's _SHORT_ROW: sums up to this length are one thread's loop


def per_dispatch(dev, bindings_per_tensor: int, other_bindings: int = 0) -> int:
    """How many tensors one dispatch binds: the adapter's storage bindings per shader stage
    (8 under WebGPU's defaults, 48 on lavapipe) less `other_bindings`, at most MAX_TENSORS."""
    limit = int(getattr(dev, "limits", {}).get("max-storage-buffers-per-shader-stage", 8))
    return max(1, min(MAX_TENSORS, (limit - other_bindings) // bindings_per_tensor))


@functools.lru_cache(maxsize=None)
def arrays(names: tuple[str, ...], count: int, first_binding: int, writable: tuple[str, ...] = (),
           stubs: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> str:
    """WGSL for `count` bindings of each name in `names` (name0.., bindings numbered from
    first_binding, name by name) with `name_load(k, i)`, and `name_store(k, i, value)` for the
    `writable` ones (read_write); `stubs` get functions that bind nothing (loads give 0).
    `types`: each name's element type, f32 (the default) or f16; values are f32 either way
    (an f16 load widens exactly, a store rounds as the cast kernel's f16())."""
    lines = []
    binding = first_binding
    for j, name in enumerate(names):
        access = "read_write" if name in writable else "read"
        element = types[j] if j < len(types) else "f32"
        for k in range(count):
            lines.append(f"@group(0) @binding({binding}) var<storage, {access}> {name}{k}: array<{element}>;")
            binding += 1
        half = element == "f16"
        cases = " ".join(f"case {k}u: {{ return {f'f32({name}{k}[i])' if half else f'{name}{k}[i]'}; }}"
                         for k in range(count))
        lines.append(f"fn {name}_load(k: u32, i: u32) -> f32 {{ switch k {{ {cases} default: {{ return 0.0; }} }} }}")
        if name in writable:
            store = "f16(value)" if half else "value"
            cases = " ".join(f"case {k}u: {{ {name}{k}[i] = {store}; }}" for k in range(count))
            lines.append(f"fn {name}_store(k: u32, i: u32, value: f32) {{ switch k {{ {cases} default: {{}} }} }}")
    for name in stubs:
        lines.append(f"fn {name}_load(k: u32, i: u32) -> f32 {{ return 0.0; }}")
        lines.append(f"fn {name}_store(k: u32, i: u32, value: f32) {{}}")
    return "\n".join(lines)


def first_workgroups(lengths) -> tuple[list[int], int]:
    """(first workgroup of each tensor, total workgroups) for one thread per element."""
    firsts, total = [], 0
    for n in lengths:
        firsts.append(total)
        total += -(-n // WORKGROUP_1D)
    return firsts, total


def unit_table(lengths) -> tuple[list[int], int]:
    """The `tensors` words of tensor_params for kernels that take four elements a thread,
    for tensors of these lengths ((units of four, first workgroup, n, 0) each), and the
    total workgroups."""
    units = [-(-n // 4) for n in lengths]
    firsts, total = first_workgroups(units)
    return [v for u, first, n in zip(units, firsts, lengths) for v in (u, first, n, 0)], total


def groups(items: list, size: int) -> list[list]:
    """items cut into consecutive lists of at most `size`."""
    return [items[i:i + size] for i in range(0, len(items), size)]


@functools.lru_cache(maxsize=None)
def _sum_params(count: int) -> Params:
    return Params("count: u32", "zero: u32", "total_workgroups: u32", "pad: u32", f"jobs: u32[{4 * count}]")


@functools.lru_cache(maxsize=None)
def _sum_source(count: int, squares: bool) -> str:
    term = "bitcast<f32>(bitcast<u32>(a * a) ^ P.zero)" if squares else "a"
    return load_shader("foreach_sum_squares.wgsl", **_sum_params(count).subs(), ARRAYS=arrays(("src",), count, 1),
                       TERM=term, SUMS_BINDING=count + 1, PARTIALS_BINDING=count + 2)


def _sum_pass(dev, jobs: list, sums, squares: bool):
    """One pass over jobs (source Buffer, offset, n, out): sums of one-chunk jobs go to
    sums[out]; returns (the partials Buffer, the next pass's jobs) for the longer ones."""
    n_partials = sum(-(-n // _CHUNK) for _, _, n, _ in jobs if n > _CHUNK)
    partials = dev.empty(max(n_partials, 1))
    following, at = [], 0
    size = per_dispatch(dev, 1, 2)
    for part in groups(jobs, size):
        table, total = [], 0
        for src, offset, n, out in part:
            chunks = 1 if n <= _SHORT else -(-n // _CHUNK)
            if chunks > 1:
                table += (n, offset, total, at)
                following.append((partials, at, chunks, out))
                at += chunks
            else:
                table += (n, offset, total, out)
            total += chunks
        count = len(part)
        kernel = dev.kernel(f"foreach_sum[{count}]" + ("_squares" if squares else ""), _sum_source(count, squares),
                            count, 2, _sum_params(count).format())
        dev.launch(kernel, [src for src, _, _, _ in part], [sums, partials], (count, 0, total, 0, *table),
                   dev.grid(total))
    return partials, following


def sum_squares(dev, bufs):
    """[len(bufs)]: the sum of squares of each f32 Buffer, each with the bits that
    sum_all(x * x) gives (its squares rounded to f32 and summed in reduce_inner's order),
    several Buffers per dispatch. Empty Buffers give 0."""
    for i, b in enumerate(bufs):
        check_buffer("sum_squares", f"bufs[{i}]", b)
        if b.dtype != "f32":
            raise ValueError(f"sum_squares: bufs[{i}] must be f32, got {b.dtype}")
    sums = dev.empty(max(len(bufs), 1))
    jobs = [(b, 0, b.len, i) for i, b in enumerate(bufs)]
    squares = True
    while jobs:
        _, jobs = _sum_pass(dev, jobs, sums, squares)
        squares = False
    return sums


@functools.lru_cache(maxsize=None)
def tensor_params(count: int) -> Params:
    """The uniform block of a kernel whose tensor k has tensors[k] = (units, first workgroup, n, 0)
    (unit_table)."""
    return Params("count: u32", "total_workgroups: u32", "pad0: u32", "pad1: u32", f"tensors: u32[{4 * count}]")


@functools.lru_cache(maxsize=None)
def _scale_source(count: int) -> str:
    return load_shader("foreach_scale.wgsl", **tensor_params(count).subs(), ARRAYS=arrays(("t",), count, 2, ("t",)))


def scale_by(dev, bufs, factor) -> None:
    """Multiply each f32 Buffer of `bufs` in place by factor[0] (a 1-element f32 Buffer on the
    GPU), several Buffers per dispatch; each product is what `mul` gives."""
    check_buffer("scale_by", "factor", factor, 1)
    if factor.dtype != "f32":
        raise ValueError(f"scale_by: factor must be f32, got {factor.dtype}")
    for i, b in enumerate(bufs):
        check_buffer("scale_by", f"bufs[{i}]", b)
        if b.dtype != "f32":
            raise ValueError(f"scale_by: bufs[{i}] must be f32, got {b.dtype}")
        if b._gpu is factor._gpu:
            raise ValueError(f"scale_by: bufs[{i}] is the factor's Buffer")
    if len({id(b._gpu) for b in bufs}) != len(bufs):
        raise ValueError("scale_by: a Buffer is listed twice")
    live = [b for b in bufs if b.len]
    for part in groups(live, per_dispatch(dev, 1, 1)):
        count = len(part)
        table, total = unit_table([b.len for b in part])     # four elements a thread (foreach_scale.wgsl)
        kernel = dev.kernel(f"foreach_scale[{count}]", _scale_source(count), 1, count, tensor_params(count).format())
        dev.launch(kernel, [factor], part, (count, total, 0, 0, *table), dev.grid(total))


@functools.lru_cache(maxsize=None)
def _cast_source(count: int, src: str, dst: str) -> str:
    """foreach_cast.wgsl for `count` tensors of `src` to `dst`: out_unit stores a unit of four."""
    element = "vec2<f16>" if dst == "f16" else "f32"
    lines = [f"@group(0) @binding({1 + count + k}) var<storage, read_write> out{k}: array<{element}>;"
             for k in range(count)]
    if dst == "f16":   # two halves a word: the unit's first pair, and its second where it has one
        body = ("out{k}[2u * u] = vec2<f16>(f16(v.x), f16(v.y)); "
                "if (4u * u + 2u < n) {{ out{k}[2u * u + 1u] = vec2<f16>(f16(v.z), f16(v.w)); }}")
    else:
        body = " ".join(f"if (4u * u + {j}u < n) {{{{ out{{k}}[4u * u + {j}u] = v.{c}; }}}}"
                        for j, c in enumerate("xyzw"))
    cases = " ".join(f"case {k}u: {{ {body.format(k=k)} }}" for k in range(count))
    lines.append(f"fn out_unit(k: u32, u: u32, n: u32, v: vec4<f32>) {{ switch k {{ {cases} default: {{}} }} }}")
    return load_shader("foreach_cast.wgsl", **tensor_params(count).subs(),
                       ARRAYS=arrays(("src",), count, 1, types=(src,)) + "\n" + "\n".join(lines))


def cast_many(dev, bufs, dtype: str, outs=None) -> list:
    """Each Buffer of `bufs` (all f32 or all f16) converted to `dtype`, the other of the two,
    several per dispatch, into new Buffers or `outs` (one of `dtype` per Buffer, as long);
    returns them. Each has the bits the cast kernel (nd.launch_cast) gives."""
    for i, b in enumerate(bufs):
        check_buffer("cast_many", f"bufs[{i}]", b)
    kinds = {b.dtype for b in bufs}
    if kinds and (kinds | {dtype} != {"f32", "f16"} or len(kinds) > 1):
        raise ValueError(f"cast_many: converts f32 Buffers to f16 or f16 to f32, got {sorted(kinds)} to {dtype}")
    if outs is None:
        outs = [dev.empty(b.len, dtype) for b in bufs]
    elif len(outs) != len(bufs):
        raise ValueError(f"cast_many: {len(outs)} outs for {len(bufs)} Buffers")
    for i, (b, out) in enumerate(zip(bufs, outs)):
        check_buffer("cast_many", f"outs[{i}]", out, b.len, f"len(bufs[{i}])")
        if out.dtype != dtype:
            raise ValueError(f"cast_many: outs[{i}] must be {dtype}, got {out.dtype}")
    live = [(b, out) for b, out in zip(bufs, outs) if b.len]
    for part in groups(live, per_dispatch(dev, 2)):
        count = len(part)
        table, total = unit_table([b.len for b, _ in part])     # four elements a thread (foreach_cast.wgsl)
        kernel = dev.kernel(f"foreach_cast[{count}]_{part[0][0].dtype}_{dtype}",
                            _cast_source(count, part[0][0].dtype, dtype), count, count, tensor_params(count).format())
        dev.launch(kernel, [b for b, _ in part], [out for _, out in part], (count, total, 0, 0, *table),
                   dev.grid(total))
    return outs
