"""Row kernels that hold the whole row in registers: softmax, its backward, their causal
forms, layer norm.

One workgroup per row, as the looped kernels (kernels/softmax.wgsl, layer_norm.wgsl), but
each thread loads its share of the row once into named variables (vec4 units where the
row length is a multiple of 4, else scalars), reduces, and writes from registers: one
read and one write of the row instead of three or four passes over it. The reductions
(lib/row_reduce_subgroup.wgsl or lib/row_reduce_tree.wgsl) combine (maximum, sum under
that maximum) pairs, so softmax needs one reduction (online max and sum). Layer norm
needs one too: (sum, sum of squares) of the deviations from the row's first element,
reduced together; rows where that one-pass variance would be inaccurate (overflowing or
tiny squares, NaN/inf, constant rows, heavy cancellation) take the two-reduction form in
the same kernel (the mean; then the largest deviation and the sum of squares scaled by it).

The causal kinds (softmax_causal, softmax_causal_backward; ops/softmax.py) are the same
kernels for attention's is_causal scores, with the semantics of the looped
kernels/softmax_causal*.wgsl: row r of each block of `length` rows keeps its elements
c <= r % length (the first `kept`), the others are masked. Each unit knows which of its
elements are kept (per lane for vec4 units); the softmax and the dot product take the kept
ones only, a masked output is 0, or NaN where torch's (a 0/-inf mask added, then softmax)
is: a masked x that is NaN or +inf (x + (-inf) is NaN), a masked grad not finite (grad * 0
is NaN), or a row sum that is NaN or 0. So those masked values are still read (the whole
row of x, or of grad): the forward tests masked x from its bits and a poisoned thread
makes its partial NaN before the one reduction (no second reduction for the flag); the
backward's dot product takes grad * 0 at masked columns, as torch's. The backward reads y
only in units that hold a kept element (a vec4 across the diagonal drops its masked
lanes), so a masked y is never used. Their Params are the looped kernels' (rows, cols,
length) (`PARAMS`, `param_format`).

A `RowConfig` fixes threads per row (wg), units per thread, vec4 or scalar units and
subgroup or tree reductions; it serves rows of up to wg * units (* 4 for vec4) elements.
ops/softmax_tune.py and ops/norm_tune.py offer these configs to the generic tuner beside
the looped kernel (the fallback).

Layer norm also has leaner forms (`RowConfig.form`, a name suffix; `lean_configs`), each
the same arithmetic on the same values, so the same results, with fewer values live at
once (registers per thread are what an H200 f16 row was found to be bound by,
docs/BENCHMARKS.md): "d" finds the two-reduction fallback's largest deviation from the
row's largest and smallest element instead of keeping every deviation beside x, and
writes (mean, rstd) as one vec2 before the output; "h" (f16 vec4 rows) is "d" with x held
as its stored f16 bits (two u32 per unit instead of four f32) and widened at each use.

Rows of exactly a config's capacity (4096 = 256 threads x 2 units of 8 halves, say) get
its exact form (`RowConfig.exact`, chosen by `generate` from the row length): the length a
constant and no unit masked, the same arithmetic on the same values.

f16 layer norm also has word forms (`word_configs`): x, y, gamma and beta read and
written as u32 words (unpack2x16float / pack2x16float; the f16 matmul's word loads beat
vec4<f16> ones on an H200): "w4" units of 4 halves (vec2<u32>), "w8" units of 8 halves
(vec4<u32>: 16-byte loads and stores, two vec4<f32> parts per unit); "d"'s arithmetic,
x widened to f32 at the load, or with an "h" suffix ("w4h", "w8h") held as its bits and
widened at each use as in form "h". A w4 form partitions the row as the vec4 configs do
(the same results as "d"); a w8 form gives each thread other elements, so its sums
round differently (results within an ulp of f16 of the other forms).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from ..runtime import load_shader
from ..runtime.dtypes import dtype_of

CAUSAL_KINDS = ("softmax_causal", "softmax_causal_backward")
KINDS = ("softmax", "softmax_backward", "layer_norm") + CAUSAL_KINDS
# The uniform Params of each kind, declared once: the WGSL struct (kernels/row_registers.wgsl)
# and the launch's struct format (param_format) are both made from these. The causal kinds
# take the looped causal kernels' (rows, cols, length), so one launch serves both forms.
PARAMS = {"row": (("rows", "u32"), ("cols", "u32"), ("eps", "f32"), ("flags", "u32")),
          "causal": (("rows", "u32"), ("cols", "u32"), ("length", "u32"))}


def params(kind: str) -> tuple[tuple[str, str], ...]:
    """(name, WGSL type) of each field of kind's Params, in order."""
    return PARAMS["causal" if kind in CAUSAL_KINDS else "row"]


def param_format(kind: str) -> str:
    """The struct format (runtime Device.kernel) of kind's Params: 'I' per u32, 'f' per f32."""
    return "".join({"u32": "I", "f32": "f"}[wgsl_t] for _, wgsl_t in params(kind))


PARAM_FORMAT = param_format("softmax")  # "IIfI": rows, cols, eps, flags (every kind but the causal)
_NAME = re.compile(r"^r(\d+)x(\d+)([vs])([gt])([a-z0-9]*)$")
# layer norm's forms (module docstring); "" is the one every kind has
FORMS = ("", "d", "h", "w4", "w4h", "w8", "w8h")
F16_FORMS = ("h", "w4", "w4h", "w8", "w8h")  # forms that read f16 rows only
_MAX_UNITS = 16  # registers per thread: 16 vec4 (64 floats) at most


@dataclass(frozen=True)
class RowConfig:
    wg: int          # threads per row (a power of two)
    units: int       # units per thread
    vec: bool        # vec4 units (rows of a multiple of 4 elements) or scalars
    subgroup: bool   # subgroup reductions (adapter feature 'subgroup') or a workgroup tree
    form: str = ""   # layer norm only: "" or a leaner form of the same arithmetic (FORMS)
    # rows of exactly capacity() elements only, their length a constant and no unit masked:
    # set by generate() for such rows (the same results; not part of the name, not tuned)
    exact: bool = False

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"row kernel config: form must be one of {FORMS}, got {self.form!r}")
        if self.form in F16_FORMS and not self.vec:
            raise ValueError(f"row kernel config: form {self.form!r} (f16 bits) needs vec4 units")

    @property
    def name(self) -> str:
        return f"r{self.wg}x{self.units}{'v' if self.vec else 's'}{'g' if self.subgroup else 't'}{self.form}"

    @classmethod
    def parse(cls, name: str) -> "RowConfig":
        found = _NAME.match(name)
        if not found:
            raise ValueError(f"row kernel config: cannot parse {name!r}; expected like 'r256x4vg'")
        wg, units, vec, sub, form = found.groups()
        return cls(int(wg), int(units), vec == "v", sub == "g", form)

    @property
    def words(self) -> int:
        """u32 words per unit of the word forms ("w4": 2, "w8": 4); 0 for the others."""
        return int(self.form[1]) // 2 if self.form.startswith("w") else 0

    @property
    def held(self) -> bool:
        """x kept in registers as its f16 bits, widened at each use (forms "h", "w4h", "w8h")."""
        return self.form.endswith("h")

    def elements(self) -> int:
        """Row elements per unit."""
        return 2 * self.words if self.words else (4 if self.vec else 1)

    def capacity(self) -> int:
        """The longest row (elements) this config holds."""
        return self.wg * self.units * self.elements()

    def serves(self, cols: int) -> bool:
        return cols <= self.capacity() and cols % self.elements() == 0


def configs_for(cols: int, max_threads: int, subgroups: bool) -> list[RowConfig]:
    """Register configs that hold a row of `cols` elements: for each power-of-two width
    from 32 to max_threads, the fewest units per thread (at most 16), vec4 when cols % 4
    == 0; each with subgroup reductions (when the adapter has them) and with a tree."""
    vec = cols % 4 == 0
    units_per_row = cols // 4 if vec else cols
    found = []
    wg = 32
    while wg <= max_threads:
        units = -(-units_per_row // wg)
        if units <= _MAX_UNITS and (wg == 32 or units_per_row > wg // 2):
            for sub in ((True, False) if subgroups else (False,)):
                found.append(RowConfig(wg, units, vec, sub))
        wg *= 2
    return found


def lean_configs(cols: int, max_threads: int, subgroups: bool, dtype: str) -> list[RowConfig]:
    """Layer norm's leaner forms worth timing for rows of `cols`: of the configs_for
    widths with 4 or more units per thread (where registers are scarce), those with the
    adapter's preferred reduction (subgroups where it has them), in form "d", and in f16
    with vec4 units also "h"."""
    forms = ("d", "h") if dtype == "f16" and cols % 4 == 0 else ("d",)
    return [RowConfig(c.wg, c.units, c.vec, c.subgroup, form) for c in configs_for(cols, max_threads, subgroups)
            if c.units >= 4 and c.subgroup == subgroups for form in forms]


def word_configs(cols: int, max_threads: int, subgroups: bool, dtype: str) -> list[RowConfig]:
    """f16 layer norm's word forms worth timing for rows of `cols` (module docstring), with
    the adapter's preferred reduction: "w8"/"w8h" (cols % 8 == 0) at each power-of-two
    width from 32 with 2 to 16 units of 8 halves, and "w4"/"w4h" (cols % 4 == 0) at the
    widths lean_configs offers (4 or more units of 4 halves)."""
    if dtype != "f16":
        return []
    found = []
    if cols % 8 == 0:
        units_per_row = cols // 8
        wg = 32
        while wg <= max_threads:
            units = -(-units_per_row // wg)
            if 2 <= units <= _MAX_UNITS:
                found += [RowConfig(wg, units, True, subgroups, form) for form in ("w8", "w8h")]
            wg *= 2
    if cols % 4 == 0:
        found += [RowConfig(c.wg, c.units, True, subgroups, form) for c in configs_for(cols, max_threads, subgroups)
                  if c.units >= 4 and c.subgroup == subgroups for form in ("w4", "w4h")]
    return found


# ---------------------------------------------------------------------------- generation


def _hmax(v: str, vec: bool) -> str:
    return f"max(max({v}.x, {v}.y), max({v}.z, {v}.w))" if vec else v


def _hmin(v: str, vec: bool) -> str:
    return f"min(min({v}.x, {v}.y), min({v}.z, {v}.w))" if vec else v


def _hsum(v: str, vec: bool) -> str:
    return f"(({v}.x + {v}.y) + ({v}.z + {v}.w))" if vec else v


def _word_t(c: RowConfig) -> str:
    """The WGSL type of a word form's unit (and of form "h"'s x): its halves as u32 words."""
    return "vec4<u32>" if c.words == 4 else "vec2<u32>"


def _bindings(kind: str, unit_t: str, c: RowConfig | None = None) -> str:
    names = {"softmax": (["x"], ["y"]), "softmax_backward": (["grad", "y"], ["dx"]),
             "layer_norm": (["x", "gamma", "beta"], ["y"]), "softmax_causal": (["x"], ["y"]),
             "softmax_causal_backward": (["grad", "y"], ["dx"])}[kind]
    form = c.form if c is not None else ""
    lines = []
    for i, name in enumerate(names[0] + names[1]):
        access = "read" if i < len(names[0]) else "read_write"
        # form "h": x read as f16 bits; the word forms: every row array as u32 words
        held = _word_t(c) if c is not None and (c.words or (form == "h" and name == "x")) else unit_t
        lines.append(f"@group(0) @binding({i + 1}) var<storage, {access}> {name}: array<{held}>;")
    if kind == "layer_norm":
        pair = "vec2<f32>" if form else "f32"  # the lean forms store (mean, rstd) at once
        lines.append(f"@group(0) @binding({len(lines) + 1}) var<storage, read_write> stats: array<{pair}>;")
    return "\n".join(lines)


_RESCALE = {
    # a partial sum of exp(x - m) seen under the common maximum `top`
    "softmax": "fn rescale(s: f32, m: f32, top: f32) -> f32 { return s * exp(m - top); }",
    "softmax_backward": "fn rescale(s: f32, m: f32, top: f32) -> f32 { return s; }  // unused",
    # a partial sum of (d / m)^2 seen as (d / top)^2 (m <= top; all zero when top is 0)
    "layer_norm": "fn rescale(s: f32, m: f32, top: f32) -> f32 {\n"
                  "    if (top > 0.0) { let r = m / top; return s * r * r; }\n"
                  "    return 0.0;\n}",
}
_RESCALE.update(softmax_causal=_RESCALE["softmax"], softmax_causal_backward=_RESCALE["softmax_backward"])


def _in_row(c: RowConfig, u: int) -> str:
    """Whether unit u of this thread lies in the row: a test, or `true` in the exact form
    (rows of exactly the config's capacity, `RowConfig.exact`), where every unit does, so
    that the compiler drops the masks (an f16 layer-norm row of 4096 ran 0.5 us faster so
    on an H200, docs/BENCHMARKS.md)."""
    return "true" if c.exact else f"i{u} < n"


def _loads(c: RowConfig, names: list[str], fill: str, comp: str) -> list[str]:
    """Index, bound and masked load of every unit of every named input."""
    lines = []
    for u in range(c.units):
        lines.append(f"let i{u} = tid + {u * c.wg}u;")
        lines.append(f"let ok{u} = {_in_row(c, u)};")
        for name in names:
            lines.append(f"var {name}{u} = {comp}({fill});")
            lines.append(f"if (ok{u}) {{ {name}{u} = {comp}({name}[base + i{u}]); }}")
    return lines


def _body(kind: str, c: RowConfig, comp: str, store: str, one_pass: bool, affine: int = 3) -> list[str]:
    U = range(c.units)
    if kind == "softmax":
        lines = _loads(c, ["x"], "LOWEST", comp)
        lines.append("var m = LOWEST;")
        lines += [f"m = max(m, {_hmax(f'x{u}', c.vec)});" for u in U]
        lines.append("var s = 0.0;")
        for u in U:
            lines.append(f"var e{u} = {comp}(0.0);")
            lines.append(f"if (ok{u}) {{ e{u} = exp(x{u} - {comp}(m)); }}")
            lines.append(f"s += {_hsum(f'e{u}', c.vec)};")
        lines.append("let top = reduce_top(me, m, s);  // (row maximum, sum of exp(x - maximum))")
        lines.append("let scale = exp(m - top.x) / top.y;")
        lines += [f"if (ok{u}) {{ y[base + i{u}] = {store}(e{u} * scale); }}" for u in U]
        return lines
    if kind in CAUSAL_KINDS:
        return _causal_body(kind, c, comp, store)
    if kind == "softmax_backward":
        lines = _loads(c, ["grad", "y"], "0.0", comp)
        lines.append("var acc = 0.0;")
        lines += [f"acc += {_hsum(f'(grad{u} * y{u})', c.vec)};" for u in U]
        lines.append("let dot = reduce_sum(me, acc);")
        lines += [f"if (ok{u}) {{ dx[base + i{u}] = {store}(y{u} * (grad{u} - {comp}(dot))); }}" for u in U]
        return lines
    return _layer_norm_body(c, comp, store, one_pass, affine)


def _causal_body(kind: str, c: RowConfig, comp: str, store: str) -> list[str]:
    """The causal kinds (module docstring): the plain softmax's arithmetic on the kept
    elements (c < kept) of each unit, k{u} saying which (per lane for vec4 units).
    Forward: every masked x is tested from its bits, and a poisoned thread's partial sum
    made NaN before the one reduction, so NaN reaches every thread through it (no second
    reduction for a flag). Backward: a masked y is 0 here (not loaded, or its lane
    dropped), and the dot product multiplies every grad by its y, a masked grad too: as in
    torch's product through the mask, grad * 0 is NaN where that grad is not finite."""
    U = range(c.units)
    vec = c.vec
    lines = ["let kept = min(P.cols, row % P.length + 1u);  // row elements c < kept are kept, the rest masked",
             "var nan_bits = 0x7fc00000u;  // a var: Tint refuses a NaN made by a constant expression",
             "let nan = bitcast<f32>(nan_bits);"]
    if vec:
        lines.append("let lanes = vec4<u32>(0u, 1u, 2u, 3u);  // element offsets in a unit")
    kept = [f"(vec4<u32>(4u * i{u}) + lanes < vec4<u32>(kept))" if vec else f"i{u} < kept" for u in U]
    if kind == "softmax_causal":
        lines += _loads(c, ["x"], "LOWEST", comp)
        lines += [f"let k{u} = {kept[u]};" for u in U]
        # masked and poisoning: in the row (past it x is LOWEST, which does not poison), not kept
        poisons = [f"any(poisons4(x{u}) & !k{u})" if vec else f"(poisons(x{u}) && !k{u})" for u in U]
        lines.append("var poisoned = false;  // a masked NaN or +inf: x + (-inf) is NaN, and so is torch's row")
        lines += [f"poisoned = poisoned || {test};" for test in poisons]
        lines.append("var m = LOWEST;")
        for u in U:
            lines.append(f"let kept_x{u} = select({comp}(LOWEST), x{u}, k{u});")
            lines.append(f"m = max(m, {_hmax(f'kept_x{u}', vec)});")
        lines.append("var s = 0.0;")
        for u in U:
            lines.append(f"let e{u} = select({comp}(0.0), exp(x{u} - {comp}(m)), k{u});")
            lines.append(f"s += {_hsum(f'e{u}', vec)};")
        lines.append("if (poisoned) { s = nan; }")
        lines.append("let top = reduce_top(me, m, s);  // (row maximum, sum of exp(x - maximum)), kept elements")
        lines.append("let scale = exp(m - top.x) / top.y;")
        # exp(-inf - max) / sum: 0, but NaN as torch's where the sum is NaN (a NaN or +inf
        # score, kept or masked) or 0 (every kept score -inf); the same in every thread
        lines.append("let masked = select(0.0, nan, non_finite(top.y) || top.y == 0.0);")
        lines += [f"if (ok{u}) {{ y[base + i{u}] = {store}(select({comp}(masked), e{u} * scale, k{u})); }}"
                  for u in U]
        return lines
    # backward: grad in full (a masked one not finite makes the row NaN); y only where kept
    lines += _loads(c, ["grad"], "0.0", comp)
    lines += [f"let k{u} = {kept[u]};" for u in U]
    for u in U:
        # a unit wholly past the diagonal is not loaded; a vec4 across it drops its masked lanes
        lines.append(f"var y{u} = {comp}(0.0);")
        load = f"{comp}(y[base + i{u}])"
        if vec:
            lines.append(f"if (4u * i{u} < kept) {{ y{u} = select({comp}(0.0), {load}, k{u}); }}")
        else:
            lines.append(f"if (k{u}) {{ y{u} = {load}; }}")
    lines.append("var acc = 0.0;  // masked terms grad * 0: 0, or NaN for a grad not finite, as torch's")
    lines += [f"acc += {_hsum(f'(grad{u} * y{u})', vec)};" for u in U]
    lines.append("let dot = reduce_sum(me, acc);")
    lines.append("let masked = select(0.0, nan, non_finite(dot));  // 0 * (grad - dot), NaN where dot is not finite")
    lines += [f"if (ok{u}) {{ dx[base + i{u}] = {store}(select({comp}(masked), y{u} * (grad{u} - {comp}(dot)), k{u})); }}"
              for u in U]
    return lines


def _parts(c: RowConfig) -> list[tuple[int, int, str]]:
    """(unit, part, tag) of every vec4 of f32 math a thread holds: one per unit (tag "3"
    for unit 3), but two per unit of form "w8" (its 8 halves: tags "3a", "3b")."""
    if c.words == 4:
        return [(u, p, f"{u}{'ab'[p]}") for u in range(c.units) for p in range(2)]
    return [(u, 0, f"{u}") for u in range(c.units)]


def _unpack(bits: list[str]) -> str:
    """vec4<f32> of the four halves in two u32 words."""
    return f"vec4<f32>(unpack2x16float({bits[0]}), unpack2x16float({bits[1]}))"


def _widen(c: RowConfig):
    """Part `tag` of unit u (_parts) as f32 math (`comp`) at one of its uses. In the held
    forms ("h", "w4h", "w8h") x{u} holds the unit's f16 bits (u32 words), widened here
    (exactly, as the other forms' load does); a `guard` k ORs hide{k} (always 0) into the
    bits first, so that a compiler cannot take this use's f32 values for another use's and
    keep one f32 copy live across the barriers between them: the copy the form is there
    to avoid. Uses where one dominates the other (the one-pass sums, the fallback's sums,
    its squares, the output) get distinct guards. The other forms hold x{tag} in f32."""
    def widen(u: int, guard: int = 0, part: int = 0, tag: str = "") -> str:
        if not c.held:
            return f"x{tag or u}"
        lanes = "xy" if part == 0 else "zw"
        return _unpack([f"x{u}.{lane}" if not guard else f"x{u}.{lane} | hide{guard}" for lane in lanes])
    return widen


def _word_loads(c: RowConfig) -> list[str]:
    """The word forms' loads of x: index, bound, and the unit's words (held forms) or its
    f32 parts (widened here, 0 past the row)."""
    if c.held:
        return _loads(c, ["x"], "0u", _word_t(c))
    lines = []
    for u in range(c.units):
        lines += [f"let i{u} = tid + {u * c.wg}u;", f"let ok{u} = {_in_row(c, u)};"]
        tags = [tag for unit, _, tag in _parts(c) if unit == u]
        lines += [f"var x{tag} = vec4<f32>(0.0);" for tag in tags]
        lines.append(f"if (ok{u}) {{")
        lines.append(f"    let raw{u} = x[base + i{u}];")
        lines += [f"    x{tag} = {_unpack([f'raw{u}.{lane}' for lane in lanes])};"
                  for tag, lanes in zip(tags, ("xy", "zw"))]
        lines.append("}")
    return lines


def _layer_norm_body(c: RowConfig, comp: str, store: str, one_pass: bool, affine: int) -> list[str]:
    U = range(c.units)
    X = _widen(c)
    parts = _parts(c)
    if c.words:
        lines = _word_loads(c)
    elif c.form == "h":
        lines = _loads(c, ["x"], "0u", "vec2<u32>")
    else:
        lines = _loads(c, ["x"], "0.0", comp)
    if c.held:
        # flags holds 0..3 (layernorm.py): these are 0, but the compiler cannot know it
        lines += [f"let hide{k} = P.flags >> {32 - k}u;" for k in (1, 2, 3)]
    # The exact form's row length as a constant where that changes no result: a power of two,
    # whose divisions a compiler may turn into exact multiplications (NVIDIA's turns x / 384.0
    # into a product with a rounded reciprocal, an ulp away from the masked kernel's quotient).
    pow2 = c.capacity() & (c.capacity() - 1) == 0
    lines.append(f"let count = {float(c.capacity())};" if c.exact and pow2 else "let count = f32(P.cols);")
    # y = fma(x - pivot, rstd, -moved * rstd): the one-pass form subtracts its shift first
    # (exact for x near it) and then the small mean - shift (|moved| <= 16 deviations where
    # that form is taken), so a row of mean 1e4 and spread 1 does not lose the 2^-11 of an
    # f32 mean there; then fma(y, gamma, beta). Two fused steps an element instead of five
    # operations: f16 rows 0.4 us faster at 4096^2 on an H200 (docs/BENCHMARKS.md)
    if not one_pass:
        lines += _layer_norm_two_pass(c, comp, "")
        lines += ["let pivot = mean;", "let moved = 0.0;"]
    else:
        # One pass: (sum, sum of squares) of the deviations from the row's first element in
        # one reduction of pairs. Shifting keeps the variance accurate for rows whose mean
        # is large against their spread; a row it cannot serve accurately (squares that
        # overflow or underflow, NaN/inf, a constant row, or more than 8 bits lost to
        # cancellation) takes the two-pass path below: the same value in every thread, so
        # the branch (and its barriers) is uniform per workgroup.
        f16_bits = c.form == "h" or c.words
        first = ("unpack2x16float(x[base].x).x" if f16_bits else "x[base].x") if c.vec else "x[base]"
        lines.append(f"let shift = f32({first});")
        lines.append("var s = 0.0;")
        lines.append("var ss = 0.0;")
        for u, p, tag in parts:
            lines.append(f"let e{tag} = select({comp}(0.0), {X(u, 0, p, tag)} - {comp}(shift), ok{u});")
            lines.append(f"s += {_hsum(f'e{tag}', c.vec)};")
            lines.append(f"ss += {_hsum(f'(e{tag} * e{tag})', c.vec)};")
        lines.append("let sq = reduce_pair(me, vec2<f32>(s, ss));  // (sum, sum of squares) of x - shift")
        lines.append("let m0 = sq.x / count;")
        lines.append("var moved = m0 + fma(-m0, count, sq.x) / count;  // mean - shift")
        lines.append("let spread = sq.y / count;  // mean square of x - shift")
        lines.append("let variance = spread - moved * moved;")
        lines.append("var mean = shift + moved;")
        lines.append("var rstd = 0.0;")
        lines.append("var pivot = shift;")
        # 2^-90 < spread < 3e38 (so finite, and no square lost below the smallest normal)
        # uniform_flag (kernels/lib/row_reduce_*.wgsl): Tint cannot see that the condition is
        # uniform, and the else branch holds barriers.
        lines.append("if (uniform_flag(me, spread > 8e-28 && spread < 3e38 && variance >= spread * 0.00390625)) {")
        lines.append("    rstd = inverseSqrt(variance + P.eps);")
        lines.append("} else {")
        lines += ["    " + line for line in _layer_norm_two_pass(c, comp, "    ")]
        lines += ["    pivot = mean;", "    moved = 0.0;", "}"]
    stats = ["if (tid == 0u) {", "    stats[2u * row] = mean;", "    stats[2u * row + 1u] = rstd;", "}"]
    if c.form:  # one store, before the output: mean is not kept through it
        stats = ["if (tid == 0u) { stats[row] = vec2<f32>(mean, rstd); }"]
        lines += stats
    lines.append("let shifted = -moved * rstd;")
    if c.words:
        lines += _word_stores(c, comp, affine)
        return lines
    for u in U:
        # gamma and beta are read here, not with x: loaded early they cost f16 rows 20% on an H200
        lines.append(f"if (ok{u}) {{")
        lines += [f"    let {name[0]} = {comp}({name}[i{u}]);" for bit, name in ((1, "gamma"), (2, "beta")) if affine & bit]
        lines += [f"    y[base + i{u}] = {store}({_affine(f'{X(u, 3)} - {comp}(pivot)', comp, 'g', 'b', affine)});", "}"]
    return lines if c.form else lines + stats


def _affine(deviation: str, comp: str, g: str, b: str, affine: int) -> str:
    """The output of one value (or vec4) from its deviation x - pivot: fma(deviation, rstd,
    shifted), then times gamma g (affine bit 1) and plus beta b (bit 2), fused where both are."""
    o = f"fma({deviation}, {comp}(rstd), {comp}(shifted))"
    return {0: o, 1: f"{o} * {g}", 2: f"{o} + {b}", 3: f"fma({o}, {g}, {b})"}[affine]


def _word_stores(c: RowConfig, comp: str, affine: int) -> list[str]:
    """The word forms' output: per unit the other forms' arithmetic on each part, gamma and
    beta read as words, y written as words (pack2x16float: f32 to f16 as the other forms'
    store converts)."""
    X = _widen(c)
    lines = []
    for u in range(c.units):
        parts = [(p, tag) for unit, p, tag in _parts(c) if unit == u]
        lines.append(f"if (ok{u}) {{")
        lines += [f"    let {name[0]}w = {name}[i{u}];" for bit, name in ((1, "gamma"), (2, "beta")) if affine & bit]
        for p, tag in parts:
            g, b = (_unpack([f"{name}w.{lane}" for lane in ("xy", "zw")[p]]) for name in "gb")
            lines.append(f"    let o{p} = {_affine(f'{X(u, 3, p, tag)} - {comp}(pivot)', comp, g, b, affine)};")
        words = [f"pack2x16float(o{p}.{half})" for p, _ in parts for half in ("xy", "zw")]
        lines.append(f"    y[base + i{u}] = {_word_t(c)}({', '.join(words)});")
        lines.append("}")
    return lines


def _layer_norm_two_pass(c: RowConfig, comp: str, indent: str) -> list[str]:
    """Layer norm's accurate form, from the registers x0.. to `mean` and `rstd`: the mean
    (one reduction); then deviations scaled by their largest magnitude, so values near
    1e30 (whose squares overflow f32) still normalise, as kernels/layer_norm.wgsl (a second
    reduction of (largest |x - mean|, sum of squares under it)). Declares mean and rstd
    unless `indent` (then it assigns the one-pass form's variables). The lean forms find
    the largest |x - mean| from the largest and smallest x (the same value: rounding is
    monotonic), so the deviations are made once, for the squares, and never all kept."""
    U = range(c.units)
    X = _widen(c)
    parts = _parts(c)
    lines = ["var acc = 0.0;"]
    if not c.form:
        lines += [f"acc += {_hsum(f'x{u}', c.vec)};" for u in U]
    else:
        lines += ["var hi = LOWEST;  // the largest and smallest x of this thread's units", "var lo = -LOWEST;"]
        for u, p, tag in parts:
            lines.append(f"let w{tag} = {X(u, 1, p, tag)};")
            lines.append(f"acc += {_hsum(f'w{tag}', c.vec)};")
            lines.append(f"let top{tag} = select({comp}(LOWEST), w{tag}, ok{u});")
            lines.append(f"let bottom{tag} = select({comp}(-LOWEST), w{tag}, ok{u});")
            lines.append(f"hi = max(hi, {_hmax(f'top{tag}', c.vec)});")
            lines.append(f"lo = min(lo, {_hmin(f'bottom{tag}', c.vec)});")
    lines.append("let total = reduce_sum(me, acc);")
    # one correction step: a driver's division may be off by an ulp (NVIDIA's is), and a
    # constant row must give exact zeros
    lines.append("let mean0 = total / count;")
    lines.append(f"{'' if indent else 'let '}mean = mean0 + fma(-mean0, count, total) / count;")
    if not c.form:
        lines.append("var peak = 0.0;")
        for u in U:
            lines.append(f"let d{u} = select({comp}(0.0), x{u} - {comp}(mean), ok{u});")
            lines.append(f"peak = max(peak, {_hmax(f'abs(d{u})', c.vec)});")
    else:
        lines.append("let peak = max(0.0, max(hi - mean, mean - lo));  // largest |x - mean|; 0 without units")
    lines.append("let inv_peak = select(0.0, 1.0 / peak, peak > 0.0);")
    lines.append("var q = 0.0;")
    for u, p, tag in (parts if c.form else [(u, 0, f"{u}") for u in U]):
        deviation = f"d{u}" if not c.form else f"select({comp}(0.0), {X(u, 2, p, tag)} - {comp}(mean), ok{u})"
        lines.append(f"let z{tag} = {deviation} * inv_peak;")
        lines.append(f"q += {_hsum(f'(z{tag} * z{tag})', c.vec)};")
    lines.append("let top = reduce_top(me, peak, q);  // (largest |x - mean|, sum of squares under it)")
    lines.append("let unit = select(1.0, top.x, top.x > 0.0);")
    lines.append(f"{'' if indent else 'let '}rstd = scaled_rstd(top.y / count, P.eps, unit);  // lib/norm_rstd.wgsl")
    return lines


_WHAT = {"softmax": "y = exp(x - max) / sum exp(x - max) per row",
         "softmax_backward": "dx = y * (grad - sum grad*y) per row",
         "softmax_causal": "softmax of row r's columns c <= r % length, the others 0",
         "softmax_causal_backward": "dx = y * (grad - sum grad*y) on columns c <= r % length, the others 0",
         "layer_norm": "y = (x - mean) * rstd * gamma + beta per row; stats = (mean, rstd)"}


@functools.lru_cache(maxsize=None)
def generate(kind: str, config: RowConfig, dtype: str = "f32", one_pass: bool = True,
             cols: int | None = None, affine: int = 3) -> str:
    """The WGSL of row kernel `kind` (one of KINDS) for `config`, storing `dtype` (f32/f16).
    one_pass=False: layer norm's two-reduction form only (for comparisons and tests).
    cols: the row length the kernel will serve, when known; rows of exactly the config's
    capacity get its exact form (RowConfig.exact), which serves only them.
    affine: layer norm's gamma (bit 1) and beta (bit 2), part of the code: read
    unconditionally where present (the fused output step with its loads under the
    parameters' flags ran f16 rows 1.5 us slower on an H200, docs/BENCHMARKS.md); the
    flags in the parameters must say the same (the held forms read their high bits, which
    stay 0)."""
    if kind not in KINDS:
        raise ValueError(f"row kernel kind must be one of {KINDS}, got {kind!r}")
    if affine not in (0, 1, 2, 3):
        raise ValueError(f"{kind}: affine must be 0..3 (gamma bit 1, beta bit 2), got {affine!r}")
    if config.form and kind != "layer_norm":
        raise ValueError(f"{kind}: register config {config.name} is a layer-norm form")
    if config.form in F16_FORMS and dtype != "f16":
        raise ValueError(f"layer_norm: register config {config.name} holds f16 rows; x is {dtype}")
    if cols == config.capacity():  # (a capacity is a whole number of units)
        config = replace(config, exact=True)
    storage = dtype_of(dtype, "kernel").storage
    unit_t = f"vec4<{storage}>" if config.vec else storage
    comp = "vec4<f32>" if config.vec else "f32"
    reduce = "lib/row_reduce_subgroup.wgsl" if config.subgroup else "lib/row_reduce_tree.wgsl"
    sub_args = (",\n        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_id) group: u32,"
                " @builtin(num_subgroups) groups: u32") if config.subgroup else ""
    return load_shader(
        "row_registers.wgsl", dtype=dtype, KIND=kind, WHAT=_WHAT[kind], WG=config.wg,
        PARAMS=", ".join(f"{name}: {wgsl_t}" for name, wgsl_t in params(kind)),
        BINDINGS=_bindings(kind, unit_t, config), REDUCE=load_shader(reduce), RESCALE=_RESCALE[kind],
        HELPERS=load_shader("lib/float_bits.wgsl") if kind in CAUSAL_KINDS else "",
        SUBGROUP_ARGS=sub_args,
        ME="RowThread(tid, lane, group, groups)" if config.subgroup else "RowThread(tid, 0u, 0u, 1u)",
        UNITS=(f"{config.capacity() // config.elements()}u" if config.exact
               else f"P.cols / {config.elements()}u" if config.vec else "P.cols"),
        BODY="\n".join("    " + line for line in _body(kind, config, comp, unit_t, one_pass, affine)))
