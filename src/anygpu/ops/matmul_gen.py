"""The register-blocked matmul family: WGSL generated from a few parameters.

A `MatmulConfig` fixes the blocking (workgroup tile, k step, outputs per thread,
vector width, register prefetch, f16 or f32 staged tiles, f16 read as u32 words); a
`Variant` fixes what the buffers and the shape decide (the stored dtype, f32 or f16;
which operands are transposed, which may be read as vec4 or as 16-byte words of eight
halves, which edges need bounds checks). Products are always summed in f32: f16
operands are widened where they are staged in workgroup memory (or, for f16 tiles,
where they are read from it). `generate(config, variant)` fills kernels/matmul_family.wgsl with
fully unrolled code: accumulators and staged values are named vec4 variables,
never function-scope arrays (those spill to local memory on several drivers).

Every kernel of the family takes the parameter block of the simple kernel
(kernels/matmul_tiled.wgsl, the always-correct fallback, config None here), so
`launch` records any of them the same way.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..runtime import load_shader
from . import fusion
from .matmul_problem import PARAM_FORMAT, Problem  # noqa: F401  (re-exported: the family's callers)
from .thread_grid import ThreadGrid, outer_product_lines

# Bump when the generated code changes in a way that can change which config is fastest:
# the autotuner's disk cache is keyed by it (2: whole-tile variants made as trusted modules).
FAMILY_VERSION = 2

# The most workgroups a stream-K form may name (one dimension of a dispatch).
STREAM_LIMIT = 65535

_NAME = re.compile(r"^(\d+)x(\d+)x(\d+)_(\d+)x(\d+)_v([14])([pd]?)(h?)(w?)(?:s(\d+))?$")


@dataclass(frozen=True, order=True)
class MatmulConfig(ThreadGrid):
    """Blocking of one family member.

    tile_m x tile_n outputs per workgroup, tile_k-deep slices staged in workgroup
    memory, rows x cols outputs per thread (so (tile_m/rows) x (tile_n/cols) threads),
    vector 4: vec4 global loads and stores where the layout allows, 1: scalar only;
    prefetch: load the next k slice into registers while computing this one;
    double: also two workgroup buffers, so the next slice is staged while this one
    is read and each k step needs one barrier instead of two (implies prefetch);
    half: the staged tiles hold f16 (half the workgroup memory, so deeper k steps or
    double buffering fit; widened to f32 as the product reads them): f16 operands only;
    words: f16 operands whose contiguous axis is a multiple of 8 are read as vec4<u32>
    (eight halves per 16-byte load, no 16-bit storage access) and widened with
    unpack2x16float into f32 tiles, so the inner loop is the f32 kernels' (other
    operands of the same product take the ordinary f16 loads): f16 operands only;
    stream: when > 0, whole-tile f32 products run in the stream-K form (`streams`): that
    many workgroups share every tile's k steps evenly, so no workgroup idles through a last,
    partial wave of tiles (4096^3 in 128x256 tiles is 512 tiles: 3.88 waves of an H200's
    132), and a second kernel adds the parts of tiles that two workgroups shared; other
    products run the config's ordinary form."""

    tile_m: int
    tile_n: int
    tile_k: int
    rows: int
    cols: int
    vector: int = 4
    prefetch: bool = False
    double: bool = False
    half: bool = False
    words: bool = False
    stream: int = 0

    @property
    def name(self) -> str:
        suffix = (("d" if self.double else "p" if self.prefetch else "") + ("h" if self.half else "")
                  + ("w" if self.words else "") + (f"s{self.stream}" if self.stream else ""))
        return f"{self.tile_m}x{self.tile_n}x{self.tile_k}_{self.rows}x{self.cols}_v{self.vector}{suffix}"

    @classmethod
    def parse(cls, name: str) -> "MatmulConfig":
        """The config whose `name` is `name` (e.g. '128x128x8_8x8_v4p', '128x128x32_8x8_v4dh',
        '128x64x16_8x8_v4pw', '128x256x16_8x16_v4ps132')."""
        found = _NAME.match(name)
        if not found:
            raise ValueError(f"matmul config: cannot parse {name!r}; expected like '128x128x8_8x8_v4p'")
        tm, tn, tk, rows, cols, vector, staging, half, words, stream = found.groups()
        return cls(int(tm), int(tn), int(tk), int(rows), int(cols), int(vector),
                   prefetch=staging in ("p", "d"), double=staging == "d", half=half == "h", words=words == "w",
                   stream=int(stream or 0))

    @property
    def stages(self) -> int:
        """Workgroup buffers per operand."""
        return 2 if self.double else 1

    def workgroup_bytes(self) -> int:
        """Workgroup memory of the staged tiles, padding included (worst case)."""
        return (8 if self.half else 16) * self.stages * self.tile_k * (self.tile_m // 4 + 1 + self.tile_n // 4 + 1)

    def problems(self, max_invocations: int = 256, max_workgroup_bytes: int = 16384) -> list[str]:
        """Why this config cannot be built within the given limits ([] when it can)."""
        found = []
        for field in ("tile_m", "tile_n", "tile_k", "rows", "cols"):
            value = getattr(self, field)
            if value < 1 or value & (value - 1):
                found.append(f"{field}={value} is not a power of two")
        if self.rows % 4 or self.cols % 4 or self.tile_k % 4:
            found.append("rows, cols and tile_k must be multiples of 4")
        if self.tile_m % self.rows or self.tile_n % self.cols:
            found.append("tile_m and tile_n must be multiples of rows and cols")
        if self.vector not in (1, 4):
            found.append(f"vector={self.vector}, expected 1 or 4")
        if self.double and not self.prefetch:
            found.append("double buffering needs prefetch")
        if self.words and (self.vector != 4 or self.half):
            found.append("word loads need vector 4 and f32 tiles")
        if self.words and (self.tile_m % 8 or self.tile_n % 8 or self.tile_k % 8):
            found.append("word loads need tile_m, tile_n and tile_k multiples of 8")
        if not 0 <= self.stream <= STREAM_LIMIT:
            found.append(f"stream={self.stream}, expected 0 (off) to {STREAM_LIMIT} workgroups")
        if not found and self.threads > max_invocations:
            found.append(f"{self.threads} threads per workgroup, limit {max_invocations}")
        if not found and self.workgroup_bytes() > max_workgroup_bytes:
            found.append(f"{self.workgroup_bytes()} bytes of workgroup memory, limit {max_workgroup_bytes}")
        return found


@dataclass(frozen=True)
class Variant:
    """What the buffers and the shape decide about the generated code (see `Variant.of`)."""

    dtype: str      # stored element type of A, B and C: f32 or f16
    trans_a: bool
    trans_b: bool
    a_vec: bool     # A read as vec4 along its contiguous axis
    b_vec: bool
    c_vec: bool     # C written as vec4
    check_m: bool   # m is not a multiple of tile_m: rows need bounds checks
    check_n: bool
    check_k: bool
    a_words: bool = False   # f16 A read as vec4<u32> (8 halves) along its contiguous axis
    b_words: bool = False

    @classmethod
    def of(cls, config: MatmulConfig, m: int, n: int, k: int,
           trans_a: bool = False, trans_b: bool = False, dtype: str = "f32") -> "Variant":
        """The variant of `config` for an m x n x k product of `dtype` operands with these
        transpositions.

        vec4 access needs the contiguous axis to be a multiple of 4 (then every row
        starts 16-byte aligned (8 for f16), batch strides included, and a vec4 never
        straddles an edge); word access (eight halves in a vec4<u32>) a multiple of 8
        (rows 16-byte aligned: an odd k or row length would put a word across two rows)."""
        vec = config.vector == 4
        a_contig = m if trans_a else k    # A is [k, m] when transposed, else [m, k]
        b_contig = k if trans_b else n
        words = config.words and dtype == "f16"
        return cls(dtype, trans_a, trans_b,
                   a_vec=vec and a_contig % 4 == 0,
                   b_vec=vec and b_contig % 4 == 0,
                   c_vec=vec and n % 4 == 0,
                   check_m=m % config.tile_m != 0,
                   check_n=n % config.tile_n != 0,
                   check_k=k % config.tile_k != 0,
                   a_words=words and a_contig % 8 == 0,
                   b_words=words and b_contig % 8 == 0)


@dataclass(frozen=True)
class _Operand:
    """How one input (A or B) is staged: names in the shader and its layout."""

    buf: str          # storage buffer: A or B
    shared: str       # workgroup array: As or Bs
    pitch: str        # const name of the shared row pitch (vec4)
    base: str         # batch offset variable
    origin: str       # first outer index of this tile: row0 or col0
    extent: str       # outer size: P.m or P.n
    lead: str         # stride of the non-contiguous axis
    tile: int         # outer tile size: tile_m or tile_n
    along_k: bool     # contiguous along k (A not transposed, B transposed)
    vec: bool
    check_outer: bool
    prefix: str       # register names while prefetching: xa, xb
    words: bool = False   # read as vec4<u32> of 8 halves (then `vec` does not apply)

    def address(self, outer: str, kidx: str) -> str:
        """Element address of (outer index, k index)."""
        if self.along_k:
            return f"{self.base} + ({outer}) * {self.lead} + {kidx}"
        return f"{self.base} + ({kidx}) * {self.lead} + {outer}"


def _operands(config: MatmulConfig, variant: Variant) -> tuple[_Operand, _Operand]:
    a = _Operand("A", "As", "AS_PITCH", "a_base", "row0", "P.m",
                 "P.a_cs" if variant.trans_a else "P.a_rs", config.tile_m,
                 not variant.trans_a, variant.a_vec, variant.check_m, "xa", variant.a_words)
    b = _Operand("B", "Bs", "BS_PITCH", "b_base", "col0", "P.n",
                 "P.b_cs" if variant.trans_b else "P.b_rs", config.tile_n,
                 variant.trans_b, variant.b_vec, variant.check_n, "xb", variant.b_words)
    return a, b


def _pitch(config: MatmulConfig, op: _Operand) -> int:
    # A tile written transposed (k-contiguous operand) goes down columns of the shared
    # tile; one vec4 of padding per row spreads those writes over the banks.
    return op.tile // 4 + (1 if op.along_k else 0)


def _log2(x: int) -> int:
    return x.bit_length() - 1


def _both(*conditions: str) -> str:
    kept = [c for c in conditions if c]
    return " && ".join(kept) if kept else ""


def _width(op: _Operand) -> int:
    """Elements per unit: 8 halves of a word load, else 4."""
    return 8 if op.words else 4


def _units(config: MatmulConfig, op: _Operand) -> int:
    """Units (one staged vec4 each, one vec4 load that is scattered, or one word load of
    8 halves staged as two vec4 or scattered) per tile."""
    return config.tile_k * op.tile // _width(op)


def _unit_coords(config: MatmulConfig, op: _Operand, u: str) -> list[str]:
    """`let` lines giving the unit's coordinates within the tile.

    Neighbouring threads take neighbouring units along the operand's contiguous
    axis, so their global reads coalesce."""
    if op.words:
        if not op.along_k:             # unit = 8 outer indices at one kk
            groups = op.tile // 8
            return [f"let g8 = {u} & {groups - 1}u;", f"let kk = {u} >> {_log2(groups)}u;"]
        k8s = config.tile_k // 8       # unit = 8 kk at one outer index
        return [f"let k8 = {u} & {k8s - 1}u;", f"let o = {u} >> {_log2(k8s)}u;"]
    groups = op.tile // 4
    if not op.along_k:                 # unit = 4 outer indices at one kk
        return [f"let g = {u} & {groups - 1}u;", f"let kk = {u} >> {_log2(groups)}u;"]
    if op.vec:                         # unit = 4 kk at one outer index
        k4s = config.tile_k // 4
        return [f"let k4 = {u} & {k4s - 1}u;", f"let o = {u} >> {_log2(k4s)}u;"]
    return [f"let kk = {u} & {config.tile_k - 1}u;", f"let g = {u} >> {_log2(config.tile_k)}u;"]


def _fetch_expr(op: _Operand, variant: Variant, k0: str) -> str:
    """A vec4 expression (of the stored type) for the unit's values at k slice k0 (zeros
    outside the matrix; a vec4<u32> of 8 halves for word units)."""
    check_k = variant.check_k
    if op.words:
        if op.along_k:
            outer, kidx = f"{op.origin} + o", f"{k0} + 8u * k8"
            cond = _both(f"{outer} < {op.extent}" if op.check_outer else "",
                         f"{kidx} < P.k" if check_k else "")
        else:
            outer, kidx = f"{op.origin} + 8u * g8", f"{k0} + kk"
            cond = _both(f"{outer} < {op.extent}" if op.check_outer else "",
                         f"{kidx} < P.k" if check_k else "")
        load = f"{op.buf}[({op.address(outer, kidx)}) >> 3u]"
        return f"select(vec4<u32>(0u), {load}, {cond})" if cond else load
    vec4 = f"vec4<{variant.dtype}>"
    if op.vec and op.along_k:
        cond = _both(f"{op.origin} + o < {op.extent}" if op.check_outer else "",
                     f"{k0} + 4u * k4 < P.k" if check_k else "")
        load = f"{op.buf}[({op.address(f'{op.origin} + o', f'{k0} + 4u * k4')}) >> 2u]"
        return f"select({vec4}(0.0), {load}, {cond})" if cond else load
    if op.vec:
        cond = _both(f"{op.origin} + 4u * g < {op.extent}" if op.check_outer else "",
                     f"{k0} + kk < P.k" if check_k else "")
        load = f"{op.buf}[({op.address(f'{op.origin} + 4u * g', f'{k0} + kk')}) >> 2u]"
        return f"select({vec4}(0.0), {load}, {cond})" if cond else load
    parts = []
    for r in range(4):
        outer = f"{op.origin} + 4u * g + {r}u"
        cond = _both(f"{outer} < {op.extent}" if op.check_outer else "",
                     f"{k0} + kk < P.k" if check_k else "")
        load = f"{op.buf}[{op.address(outer, f'{k0} + kk')}]"
        parts.append(f"select(0.0, {load}, {cond})" if cond else load)
    return f"{vec4}(" + ", ".join(parts) + ")"


def _stash_lines(op: _Operand, value: str, stage: str = "", widen: str = "") -> list[str]:
    """Store the unit's vec4 into the shared tile (at offset `stage` when double buffered),
    converted to the tile's scalar type `widen` where it differs from the stored one (word
    units: a vec4<u32> of 8 halves, widened to f32 with unpack2x16float)."""
    at = f"{stage} + " if stage else ""
    if op.words:
        halves = [f"let h{c} = unpack2x16float({value}.{comp});" for c, comp in enumerate("xyzw")]
        if op.along_k:
            return halves + [f"{op.shared}[{at}(8u * k8 + {c}u) * {op.pitch} + (o >> 2u)][o & 3u] = h{c // 2}.{'xy'[c % 2]};"
                             for c in range(8)]
        return halves + [f"{op.shared}[{at}kk * {op.pitch} + 2u * g8] = vec4<f32>(h0, h1);",
                         f"{op.shared}[{at}kk * {op.pitch} + 2u * g8 + 1u] = vec4<f32>(h2, h3);"]
    if op.vec and op.along_k:
        return [f"{op.shared}[{at}(4u * k4 + {c}u) * {op.pitch} + (o >> 2u)][o & 3u] = "
                + (f"{widen}({value}.{comp});" if widen else f"{value}.{comp};")
                for c, comp in enumerate("xyzw")]
    return [f"{op.shared}[{at}kk * {op.pitch} + g] = " + (f"vec4<{widen}>({value});" if widen else f"{value};")]


def _per_unit(config: MatmulConfig, op: _Operand, body) -> list[str]:
    """Lines that run `body(s)` (a list of lines) for each of this thread's units s,
    each in its own block with u and the unit coordinates defined."""
    units = _units(config, op)
    threads = config.threads
    lines = []
    for s in range(-(-units // threads)):
        inner = [f"let u = tid + {s * threads}u;"] + _unit_coords(config, op, "u") + body(s)
        if (s + 1) * threads > units:   # last, partial round
            lines += [f"if (tid < {units - s * threads}u) {{"] + ["    " + x for x in inner] + ["}"]
        else:
            lines += ["{"] + ["    " + x for x in inner] + ["}"]
    return lines


def _n_units_per_thread(config: MatmulConfig, op: _Operand) -> int:
    return -(-_units(config, op) // config.threads)


def _compute_lines(config: MatmulConfig, stage: bool = False) -> list[str]:
    """The fully unrolled inner product over one tile_k slice (read from the buffers at
    a_stage / b_stage when double buffered; f16 tiles widened to f32 as they are read)."""
    ty_step, tx_step = config.threads_y, config.threads_x
    a_at, b_at = ("a_stage + ", "b_stage + ") if stage else ("", "")

    def read(expr: str) -> str:
        return f"vec4<f32>({expr})" if config.half else expr
    return outer_product_lines(config, config.tile_k, lambda kk, i: read(f"As[{a_at}{kk}u * AS_PITCH + ty + {i * ty_step}u]"),
                               lambda kk, j: read(f"Bs[{b_at}{kk}u * BS_PITCH + tx + {j * tx_step}u]"))


@dataclass(frozen=True)
class Epilogue:
    """Elementwise work folded into a product's store (ops/fusion.py builds it from pending
    ops that read the product): the product (times alpha) plus `bias` [n] per column when
    `bias`, then `steps`, each (expr, arity, chain_first) with expr from elementwise's UNARY /
    BINARY tables: a unary op of the value so far, or a binary op of the value so far (`a`
    when chain_first, else `b`) and the same element of the next extra input. Values of the
    chain (0: the product with its bias, k: after step k) in `written` are stored, the first
    into C. Each value is rounded as the op-by-op kernels round what they store (fusion.rounded),
    so the results are theirs bit for bit where those kernels are exact.

    Bindings after A and B: the bias, the extra inputs, C, the other outputs. The uniform
    block gains a zero word (the opaque identity of fusion.rounded) and the ops' scalars."""

    bias: bool = False
    steps: tuple = ()
    written: tuple = (0,)

    @property
    def n_extra(self) -> int:
        return sum(arity == 2 for _, arity, _ in self.steps)

    @property
    def n_inputs(self) -> int:
        return 2 + self.bias + self.n_extra

    @property
    def n_params(self) -> int:
        return sum(sum(x != "0.0" for x in fusion.param_operands(expr, arity, 0, "")) for expr, arity, _ in self.steps)

    @property
    def words(self) -> int:
        """Scalar words after the zero word's vec4 (a multiple of 4)."""
        return -(-self.n_params // 4) * 4

    def param_format(self) -> str:
        return PARAM_FORMAT + "IIII" + "f" * self.words

    def params_wgsl(self) -> str:
        fields = "\n    zero: u32, e_pad0: u32, e_pad1: u32, e_pad2: u32,"
        return fields + (f"\n    ep: array<vec4<f32>, {self.words // 4}>," if self.words else "")

    def param_fields(self) -> tuple[str, ...]:
        """The same fields as runtime.Params declarations (kernels whose block is a Params:
        the convolutions, ops/conv_gen.py); they follow fields padded to 4 words."""
        return ("zero: u32", "e_pad0: u32", "e_pad1: u32", "e_pad2: u32") + ((f"ep: f32[{self.words}]",)
                                                                             if self.words else ())

    def wgsl(self, dtype: str, c_elem: str, vec: bool, first: int = 3, target: str = "C") -> str:
        """Bindings and functions: `store4(v, i, col)` (vec: C of vec4, i a multiple of 4) or
        `store1(v, i, col)` store the epilogue of product value(s) v at element i, column col.
        The bias and extra inputs are bound from binding `first`, then the product's own
        output (named `target`, declared by the kernel), then the other outputs."""
        binding = first
        lines = []
        if self.bias:
            lines.append(f"@group(0) @binding({binding}) var<storage, read> BIAS: array<{dtype}>;")
            binding += 1
        for m in range(self.n_extra):
            lines.append(f"@group(0) @binding({binding}) var<storage, read> E{m}: array<{dtype}>;")
            binding += 1
        binding += 1  # C
        for m in range(1, len(self.written)):
            lines.append(f"@group(0) @binding({binding}) var<storage, read_write> O{m}: array<{c_elem}>;")
            binding += 1
        body = [f"    let t0 = {fusion.rounded(dtype, 'v')};"]
        if self.bias:
            body = [f"    let p = {fusion.rounded(dtype, 'v')};",
                    f"    let t0 = {fusion.rounded(dtype, 'p + f32(BIAS[col])')};"]
        names: dict = {}
        extra = n_params = 0
        if any("erf_approx" in expr for expr, _, _ in self.steps):
            lines.append(load_shader("lib/erf.wgsl"))
        for k, (expr, arity, chain_first) in enumerate(self.steps, 1):
            name = names.get((expr, arity))
            if name is None:
                name = names[(expr, arity)] = f"op{len(names)}"
                lines.append(fusion.op_function(name, expr, arity))
            operands = [f"t{k - 1}"]
            if arity == 2:
                other = f"f32(E{extra}[i])"
                extra += 1
                operands = operands + [other] if chain_first else [other] + operands
            scalars = fusion.param_operands(expr, arity, n_params, "P.ep")
            n_params += sum(x != "0.0" for x in scalars)
            call = f"{name}({', '.join(operands + scalars)})"
            body.append(f"    let t{k} = {fusion.rounded(dtype, call)};")
        fields = "\n".join(f"    o{m}: f32," for m in range(len(self.written)))
        lines.append(f"struct Epi {{\n{fields}\n}}")
        lines.append("fn epi(v: f32, i: u32, col: u32) -> Epi {\n" + "\n".join(body)
                     + f"\n    return Epi({', '.join(f't{w}' for w in self.written)});\n}}")
        outs = [target] + [f"O{m}" for m in range(1, len(self.written))]
        if vec:
            stores = [f"    {o}[i >> 2u] = vec4<{dtype}>(vec4<f32>(rx.o{m}, ry.o{m}, rz.o{m}, rw.o{m}));"
                      for m, o in enumerate(outs)]
            lines.append("fn store4(v: vec4<f32>, i: u32, col: u32) {\n"
                         "    let rx = epi(v.x, i, col);\n    let ry = epi(v.y, i + 1u, col + 1u);\n"
                         "    let rz = epi(v.z, i + 2u, col + 2u);\n    let rw = epi(v.w, i + 3u, col + 3u);\n"
                         + "\n".join(stores) + "\n}")
        else:
            stores = [f"    {o}[i] = {dtype}(r.o{m});" for m, o in enumerate(outs)]
            lines.append("fn store1(v: f32, i: u32, col: u32) {\n    let r = epi(v, i, col);\n"
                         + "\n".join(stores) + "\n}")
        return "\n".join(lines)

    def subs(self, dtype: str, c_elem: str, vec: bool) -> dict:
        """The placeholders of the kernel templates for this epilogue (None: the plain store)."""
        return {"EPILOGUE_PARAMS": self.params_wgsl(), "C_BINDING": 3 + self.bias + self.n_extra,
                "EPILOGUE": self.wgsl(dtype, c_elem, vec)}


_PLAIN = {"EPILOGUE_PARAMS": "", "C_BINDING": 3, "EPILOGUE": ""}


def _store_lines(config: MatmulConfig, variant: Variant, epilogue: Epilogue | None = None,
                 slot: bool = False) -> list[str]:
    """Store the thread's outputs (times alpha) into C, or with `slot` (the stream-K form's
    later part of a tile; its variant, as `streams` requires, f32 with vec4 stores and no
    edges) into the workgroup's slot of W: the tile's rows tile_n apart."""
    ty_step, tx_step = config.threads_y, config.threads_x
    narrow = variant.dtype != "f32"   # f32 sums rounded once, to the stored type
    if slot:
        lines = ["let row_first = 4u * ty;", "let col_first = 4u * tx;"]
    else:
        lines = ["let row_first = row0 + 4u * ty;", "let col_first = col0 + 4u * tx;"]
    target, pitch = ("W", f"{config.tile_n}u") if slot else ("C", "P.n")
    for i in range(config.rows // 4):
        for r in range(4):
            body = [f"let c_row = {'w_base' if slot else 'c_base'} + row * {pitch} + col_first;"]
            for j in range(config.cols // 4):
                acc = f"acc_{i}_{r}_{j}"
                col_off = 4 * j * tx_step
                if variant.c_vec:
                    value = f"vec4<{variant.dtype}>({acc} * alpha)" if narrow else f"{acc} * alpha"
                    store = [f"{target}[(c_row + {col_off}u) >> 2u] = {value};"]
                    if epilogue is not None:
                        store = [f"store4({acc} * alpha, c_row + {col_off}u, col_first + {col_off}u);"]
                    if variant.check_n:
                        store = [f"if (col_first + {col_off}u < P.n) {{ {store[0]} }}"]
                    body += store
                    continue
                body.append(f"let v_{j} = {acc} * alpha;")
                for c, comp in enumerate("xyzw"):
                    value = f"{variant.dtype}(v_{j}.{comp})" if narrow else f"v_{j}.{comp}"
                    store = f"C[c_row + {col_off + c}u] = {value};"
                    if epilogue is not None:
                        store = f"store1(v_{j}.{comp}, c_row + {col_off + c}u, col_first + {col_off + c}u);"
                    if variant.check_n:
                        store = f"if (col_first + {col_off + c}u < P.n) {{ {store} }}"
                    body.append(store)
            lines.append("{")
            lines.append(f"    let row = row_first + {4 * i * ty_step + r}u;")
            if variant.check_m:
                lines += ["    if (row < P.m) {"] + ["        " + x for x in body] + ["    }"]
            else:
                lines += ["    " + x for x in body]
            lines.append("}")
    return lines


def _indent(lines: list[str], depth: int) -> str:
    pad = "    " * depth
    return "\n".join(pad + line if line else line for line in lines)


@functools.lru_cache(maxsize=None)
def generate(config: MatmulConfig, variant: Variant, epilogue: Epilogue | None = None) -> str:
    """The WGSL source of `config` specialised to `variant`, storing through `epilogue`
    (None: the product as it is) (cached)."""
    problems = config.problems(max_invocations=1024, max_workgroup_bytes=1 << 30)
    if problems:
        raise ValueError(f"matmul config {config.name}: " + "; ".join(problems))
    if variant.dtype not in ("f32", "f16"):
        raise ValueError(f"matmul config {config.name}: operands of {variant.dtype}, expected f32 or f16")
    if config.half and variant.dtype != "f16":
        raise ValueError(f"matmul config {config.name}: f16 tiles need f16 operands, got {variant.dtype}")
    if config.words and variant.dtype != "f16":
        raise ValueError(f"matmul config {config.name}: word loads need f16 operands, got {variant.dtype}")
    op_a, op_b = _operands(config, variant)
    tile_type = "f16" if config.half else "f32"
    # Staged values are held in registers as stored and converted as they reach the tiles.
    widen = tile_type if tile_type != variant.dtype else ""

    def register(op: _Operand) -> str:
        """The type a unit is held in between its load and its staging."""
        return "vec4<u32>" if op.words else f"vec4<{variant.dtype}>"

    declare = [f"var acc_{i}_{r}_{j} = vec4<f32>(0.0);"
               for i in range(config.rows // 4) for r in range(4) for j in range(config.cols // 4)]

    def fetch_into_registers(k0: str) -> list[str]:
        out = []
        for op in (op_a, op_b):
            out += _per_unit(config, op, lambda s, op=op: [f"{op.prefix}{s} = {_fetch_expr(op, variant, k0)};"])
        return out

    def stash_registers(stages=("", "")) -> list[str]:
        out = []
        for op, stage in zip((op_a, op_b), stages):
            out += _per_unit(config, op, lambda s, op=op, stage=stage: _stash_lines(op, f"{op.prefix}{s}", stage, widen))
        return out

    def fetch_and_stash() -> list[str]:
        out = []
        for op in (op_a, op_b):
            out += _per_unit(config, op, lambda s, op=op: [f"let v = {_fetch_expr(op, variant, 'k0')};"]
                             + _stash_lines(op, "v", widen=widen))
        return out

    streamed = streams(config, variant, epilogue)
    # the k range of the loop: the whole of k, or in the stream-K form this part's steps
    k_start, k_stop = ("k_begin", "k_end") if streamed else ("0u", "P.k")
    prologue: list[str] = []
    next_k = f"(k0 + {config.tile_k}u)"
    if config.double:
        # Step t reads buffer t % 2 and stages slice t + 1 into the other one; the
        # single barrier then separates those writes from step t + 1's reads, and
        # step t's reads from step t + 1's writes into buffer t % 2.
        for op in (op_a, op_b):
            declare += [f"var {op.prefix}{s}: {register(op)};" for s in range(_n_units_per_thread(config, op))]
        prologue = fetch_into_registers(k_start) + stash_registers() + ["workgroupBarrier();"]
        main_loop = ([f"let stage = ((k0 - {k_start}) / {config.tile_k}u) & 1u;",
                      "let a_stage = stage * A_STAGE;", "let b_stage = stage * B_STAGE;",
                      "let a_next = A_STAGE - a_stage;", "let b_next = B_STAGE - b_stage;",
                      f"let more = {next_k} < {k_stop};",
                      "if (more) {"]
                     + ["    " + x for x in fetch_into_registers(next_k)] + ["}"]
                     + _compute_lines(config, stage=True)
                     + ["if (more) {"] + ["    " + x for x in stash_registers(("a_next", "b_next"))] + ["}"]
                     + ["workgroupBarrier();"])
    elif config.prefetch:
        for op in (op_a, op_b):
            declare += [f"var {op.prefix}{s}: {register(op)};" for s in range(_n_units_per_thread(config, op))]
        prologue = fetch_into_registers(k_start)
        main_loop = (stash_registers() + ["workgroupBarrier();",
                     f"if (k0 + {config.tile_k}u < {k_stop}) {{"]
                     + ["    " + x for x in fetch_into_registers(f"(k0 + {config.tile_k}u)")] + ["}"]
                     + _compute_lines(config) + ["workgroupBarrier();"])
    else:
        main_loop = fetch_and_stash() + ["workgroupBarrier();"] + _compute_lines(config) + ["workgroupBarrier();"]

    pitch_a, pitch_b = _pitch(config, op_a), _pitch(config, op_b)
    description = (f"config {config.name}, {variant.dtype} operands, trans_a={variant.trans_a} trans_b={variant.trans_b} "
                   f"vec4 A/B/C={variant.a_vec}/{variant.b_vec}/{variant.c_vec} words A/B={variant.a_words}/{variant.b_words} "
                   f"checks m/n/k={variant.check_m}/{variant.check_n}/{variant.check_k}")
    dtype = variant.dtype

    def element(vec: bool, words: bool) -> str:
        return "vec4<u32>" if words else f"vec4<{dtype}>" if vec else dtype
    c_elem = f"vec4<{dtype}>" if variant.c_vec else dtype
    # A variant without edge checks indexes nothing it does not own: whole tiles of buffers
    # that hold the whole problem (launch checks their lengths), workgroup tiles by
    # construction, and its one loop ends. Its module is made without naga's runtime checks
    # (runtime/shaders.py), which clamp every workgroup-memory read of the inner product.
    trusted = epilogue is None and not (variant.check_m or variant.check_n or variant.check_k)
    loop = ([f"for (var k0 = {k_start}; k0 < {k_stop}; k0 += {config.tile_k}u) {{"] + ["    " + x for x in main_loop]
            + ["}"])
    if streamed:
        body = _stream_body(config, declare + prologue + loop, _store_lines(config, variant),
                            _store_lines(config, variant, slot=True))
    else:
        body = ([f"let row0 = wid.y * {config.tile_m}u;", f"let col0 = wid.x * {config.tile_n}u;",
                 "let a_base = wid.z * P.a_bs;", "let b_base = wid.z * P.b_bs;"] + declare + prologue + loop
                + ["let alpha = bitcast<f32>(P.alpha_bits);", "let c_base = wid.z * P.c_bs;"]
                + _store_lines(config, variant, epilogue))
    plain = _PLAIN if not streamed else {**_PLAIN, "EPILOGUE_PARAMS": _STREAM_PARAMS}
    return load_shader(
        "matmul_family.wgsl", dtype, TRUSTED="//! trusted" if trusted else "",
        **(plain if epilogue is None else epilogue.subs(dtype, c_elem, variant.c_vec)),
        STREAM_BINDING=("@group(0) @binding(4) var<storage, read_write> W: array<vec4<f32>>;" if streamed else ""),
        DESCRIPTION=description,
        A_ELEM=element(variant.a_vec, variant.a_words),
        B_ELEM=element(variant.b_vec, variant.b_words),
        C_ELEM=c_elem,
        TILE_T=tile_type,
        AS_PITCH=pitch_a, BS_PITCH=pitch_b,
        AS_LEN=config.stages * config.tile_k * pitch_a, BS_LEN=config.stages * config.tile_k * pitch_b,
        A_STAGE=config.tile_k * pitch_a, B_STAGE=config.tile_k * pitch_b,
        THREADS_X=config.threads_x, THREADS_Y=config.threads_y,
        BODY=_indent(body, 1),
    )


# The stream-K form's parameters after the product's (PARAM_FORMAT + "IIII"): k steps per workgroup.
_STREAM_PARAMS = "\n    sk_per: u32, sk_pad0: u32, sk_pad1: u32, sk_pad2: u32,"


def streams(config: MatmulConfig | None, variant: Variant, epilogue: Epilogue | None = None) -> bool:
    """Whether `config` runs `variant` in its stream-K form: a config with `stream`
    workgroups, a plain f32 product (no epilogue) of whole tiles (no edge checks)."""
    return (config is not None and config.stream > 0 and epilogue is None and variant.dtype == "f32"
            and not (variant.check_m or variant.check_n or variant.check_k))


def can_stream(config: MatmulConfig | None, problem: Problem, dtype: str, epilogue: Epilogue | None = None) -> bool:
    """`streams` for `problem`: whether `config` runs it in its stream-K form."""
    return config is not None and config.stream > 0 and streams(
        config, Variant.of(config, problem.m, problem.n, problem.k, problem.trans_a, problem.trans_b, dtype), epilogue)


def _stream_body(config: MatmulConfig, tile_lines: list[str], store_c: list[str], store_w: list[str]) -> list[str]:
    """The stream-K form's body: workgroup w runs k steps [w * per, (w + 1) * per) of the
    product's steps numbered tile by tile (tiles in row-major order, batch outermost),
    one part of a tile at a time (`tile_lines`: declare, prologue and k loop of the part
    [k_begin, k_end)). A part that starts the tile is stored into C; a later one only ever
    opens a workgroup's run, so each workgroup stores at most one into its slot of W. The
    workgroup index and the parameters are uniform, so every barrier is reached by all."""
    head = [
        f"let steps = P.k / {config.tile_k}u;",
        f"let tiles_n = P.n / {config.tile_n}u;",
        f"let per_matrix = (P.m / {config.tile_m}u) * tiles_n;",
        "let total = per_matrix * P.batch * steps;",
        "let alpha = bitcast<f32>(P.alpha_bits);",
        "var it = wid.x * P.sk_per;",
        "let end = min(it + P.sk_per, total);",
        "loop {",
        "    if (it >= end) { break; }",
        "    let tile = it / steps;",
        "    let s0 = it - tile * steps;",
        "    let s1 = min(steps, s0 + (end - it));",
        "    let z = tile / per_matrix;",
        "    let t = tile - z * per_matrix;",
        f"    let row0 = (t / tiles_n) * {config.tile_m}u;",
        f"    let col0 = (t % tiles_n) * {config.tile_n}u;",
        "    let a_base = z * P.a_bs;",
        "    let b_base = z * P.b_bs;",
        f"    let k_begin = s0 * {config.tile_k}u;",
        f"    let k_end = s1 * {config.tile_k}u;",
    ]
    return (head + ["    " + x for x in tile_lines]
            + ["    if (s0 == 0u) {", "        let c_base = z * P.c_bs;"] + ["        " + x for x in store_c]
            + ["    } else {", f"        let w_base = wid.x * {config.tile_m * config.tile_n}u;"]
            + ["        " + x for x in store_w] + ["    }", "    it += s1 - s0;", "}"])


SIMPLE_TILE = 64  # output tile of kernels/matmul_tiled.wgsl


_PLAIN_ROW = "\n".join(f"    if (c{f' + {j}u' if j else ''} < P.n) {{ C[o + c{f' + {j}u' if j else ''}] = {{{{T}}}}(v.{comp}); }}"
                       for j, comp in enumerate("xyzw"))


@functools.lru_cache(maxsize=None)
def _simple_source(dtype: str = "f32", epilogue: Epilogue | None = None) -> str:
    # Integers take no alpha (it must be 1): their products stay exact.
    alpha = "bitcast<f32>(P.alpha_bits)" if dtype in ("f32", "f16") else "1"
    if epilogue is None:
        return load_shader("matmul_tiled.wgsl", dtype, ALPHA=alpha, STORE_ROW=_PLAIN_ROW.replace("{{T}}", dtype),
                           **_PLAIN)
    row = "\n".join(f"    if (c{f' + {j}u' if j else ''} < P.n) {{ store1(v.{comp}, o + c{f' + {j}u' if j else ''},"
                    f" c{f' + {j}u' if j else ''}); }}" for j, comp in enumerate("xyzw"))
    return load_shader("matmul_tiled.wgsl", dtype, ALPHA=alpha, STORE_ROW=row, **epilogue.subs(dtype, dtype, False))


def launch(dev, config: MatmulConfig | None, problem: Problem, a, b, out, epilogue: Epilogue | None = None,
           inputs: tuple = (), outputs: tuple = (), values: tuple = ()) -> None:
    """Record the product `problem` of Buffers a and b into out with `config`
    (None: the simple kernel), through `epilogue` if given: then `inputs` are its bias and
    extra inputs, `outputs` the Buffers of its written values after the first (out), and
    `values` its scalars. Raises anygpu.GpuError when the kernel does not compile."""
    if config is None:
        source = _simple_source(a.dtype) if epilogue is None else _simple_source(a.dtype, epilogue)
        name = "matmul_tiled"
        tile_m = tile_n = SIMPLE_TILE
    else:
        variant = Variant.of(config, problem.m, problem.n, problem.k, problem.trans_a, problem.trans_b, a.dtype)
        if a.len < problem.a_len or b.len < problem.b_len or out.len < problem.batch * problem.m * problem.n:
            raise ValueError(f"matmul: buffers of {a.len}, {b.len} and {out.len} elements for a "
                             f"{problem.batch}x{problem.m}x{problem.n}x{problem.k} product")
        source = generate(config, variant) if epilogue is None else generate(config, variant, epilogue)
        name = "matmul_" + config.name
        tile_m, tile_n = config.tile_m, config.tile_n
    grid = (-(-problem.n // tile_n), -(-problem.m // tile_m), problem.batch)
    if config is not None and streams(config, variant, epilogue):
        _launch_stream(dev, config, problem, source, a, b, out)
        return
    if epilogue is None:
        dev.launch(dev.kernel(name, source, 2, 1, PARAM_FORMAT), (a, b), (out,), problem.params(), grid)
        return
    kernel = dev.kernel(name + "+epilogue", source, epilogue.n_inputs, len(epilogue.written), epilogue.param_format())
    params = (*problem.params(), 0, 0, 0, 0, *values, *([0.0] * (epilogue.words - len(values))))
    dev.launch(kernel, (a, b, *inputs), (out, *outputs), params, grid)


_FIXUP_THREADS = 256  # threads per workgroup of kernels/matmul_stream_fixup.wgsl


def _launch_stream(dev, config: MatmulConfig, problem: Problem, source: str, a, b, out) -> None:
    """Record the stream-K form (`streams`) of `config`: `config.stream` workgroups share the
    product's k steps, then the fix-up adds the parts stored in W into C."""
    tile = config.tile_m * config.tile_n
    steps = problem.k // config.tile_k
    total = problem.batch * (problem.m // config.tile_m) * (problem.n // config.tile_n) * steps
    groups = min(config.stream, total)
    per = -(-total // groups)
    groups = -(-total // per)   # every workgroup has steps to run
    slots = dev.empty(groups * tile)
    kernel = dev.kernel("matmul_" + config.name, source, 2, 2, PARAM_FORMAT + "IIII")
    dev.launch(kernel, (a, b), (out, slots), (*problem.params(), per, 0, 0, 0), (groups, 1, 1))
    if groups > 1 and per % steps:   # some tile is shared: add its later parts into C
        fixup = dev.kernel("matmul_stream_fixup", _fixup_source(config.tile_m, config.tile_n), 1, 1, "I" * 8)
        dev.launch(fixup, (slots,), (out,), (steps, per, groups, problem.n // config.tile_n,
                                             (problem.m // config.tile_m) * (problem.n // config.tile_n),
                                             problem.n, problem.m * problem.n, 0),
                   (-(-tile // (4 * _FIXUP_THREADS)), groups, 1))


@functools.lru_cache(maxsize=None)
def _fixup_source(tile_m: int, tile_n: int) -> str:
    return load_shader("matmul_stream_fixup.wgsl", TILE_M=tile_m, TILE_N=tile_n, THREADS=_FIXUP_THREADS)
