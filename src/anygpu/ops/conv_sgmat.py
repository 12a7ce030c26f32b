"""Convolutions on the GPU's matrix units (Layer 0): conv2d, its input and weight gradients
and conv_transpose2d as implicit GEMMs on WGSL subgroup matrices (Dawn's
`chromium_experimental_subgroup_matrix`, see ops/sgmat.py), f16 operands, f32 accumulation,
an f16 result (f32 partial sums for a split weight gradient, summed into f16).

The GEMM is ops/sgmat.py's (a workgroup computes a BM x BN tile with wm x wn subgroups of
tm x tn result matrices; k advances TK at a time through two stages of workgroup memory,
the next stage's global loads issued before the current stage's multiplies, or, in single
members (`SgConfig.single`, "_s"), through one stage: fetch, stash, barrier, multiply,
barrier), with operands that are not matrices in memory: a kind file
(kernels/conv_sgmat_<kind>.wgsl) gives the index maths, as the f32 kinds do for
kernels/conv_gemm.wgsl:

- B (the image, k x n) is gathered through two tables in workgroup memory: the tile's
  columns decoded once (`column(g, n)`: offset, image row, image column) and each k step's
  rows (`decode_k(g, k)`: the same, plus the A index of k in w), so that
  B[k, n] = image[col.offset + k.offset] where col.row + k.row and col.col + k.col fall inside
  the image. In two-stage members the k table is double-buffered: step t+2's is written
  while step t computes, so it needs no barrier of its own; single members keep one slot,
  step t+1's written between step t's two barriers;
- A is read at `a_index(g, m, k, k_entry)`: the weight's rows (conv2d), the grad_out rows
  (weight gradient; 8 halves per load where a row's run is a multiple of 8 long) or the
  weight gathered per tap (transposed convolution);
- wide members (`SgConfig.wide`, "_v") keep the operand tiles as vec4<u32> arrays, 8 halves
  to a thread and one 16-byte store each (A's from one load where vec_a is 8, else 8 single
  halves packed; B's 8 gathered halves packed, in a [n][k] tile read with col_major loads
  where threads walk n, unless Layout.pack_b is off: then B's tile stays single halves),
  matrices loaded with offsets and strides in 16-byte units;
- the store goes through a per-subgroup f32 scratch: lane c of a result matrix writes
  column c (decoded once per matrix, `out_col`), rows `out_row_stride()` apart, with the
  bias and the conversion to the output type.

Everything out of range reads as zero, so any size works (edge tiles); groups, stride,
padding and dilation are in the index maths. conv2d's input gradient is the transposed
convolution of grad_out, one launch per output phase (ops/conv.py's form), so strided
layers multiply no inserted zeros.

`available(dev)` says whether the device runs these (f16 subgroup matrices, not turned off);
ops/conv.py routes f16 operands here, nn.functional sends autocast's conv2d and
conv_transpose2d here with f16 operands."""

from __future__ import annotations

import functools
import os
import warnings
from typing import NamedTuple

from ..runtime import Params, load_shader
from .conv_gen import output_phases
from .sgmat import SgConfig, entry_point, f16_configs, stash_unit, sum_splits

__all__: list[str] = []   # the Device ops are ops/conv.py's; this module is their f16 form

KINDS = ("conv2d", "transpose", "grad_weight")

# One uniform block for every kind (the f32 kinds' geometry and transposed-conv phase).
PARAMS = Params(*(f"{name}: u32" for name in (
    "batch", "in_c", "in_h", "in_w", "out_c", "out_h", "out_w", "groups", "kh", "kw",
    "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "has_bias", "k_per_split",
    "phase_h", "phase_w", "phase_rows", "phase_cols", "tap_r0", "tap_r_step", "taps_r",
    "tap_s0", "tap_s_step", "taps_s")))
_PAD = 8                     # halves of padding per workgroup-memory row, as sgmat's
_OUT_OF_RANGE = -1073741824  # an image row no offset brings back inside: a k or column past the end

# Tile shapes (wm, wn, tm, tn, tk) of the family: BM = wm*tm*m0 rows (output channels per
# group), BN = wn*tn*n0 columns. Small BM for layers of few channels (a digits CNN's 16),
# small BN for the weight gradient's few columns (3x3 taps of 1 input channel: 9).
SHAPES = ((1, 4, 1, 2, 32), (2, 4, 1, 2, 32), (2, 4, 2, 2, 32), (2, 2, 2, 2, 32), (4, 2, 2, 4, 32),
          (2, 4, 4, 2, 16), (2, 2, 4, 4, 32), (4, 2, 2, 2, 32), (2, 1, 2, 2, 32), (4, 1, 2, 2, 32),
          (1, 2, 2, 2, 32), (2, 4, 2, 2, 64))

# The forms of each shape, (wide, single) by name suffix: workgroup tiles of vec4<u32> (one
# 16-byte store per 8 halves; "_v"), one stage of workgroup memory without register prefetch
# ("_s"). Session 13 measured both on sgmat's products (H200): single stage +15-45% over two,
# wide tiles faster again; choose() takes a shape's "v_s" form where the shape has one.
FORMS = {"plain": (False, False), "v": (True, False), "s": (False, True), "v_s": (True, True)}
DEFAULT_FORM = "v_s"


class Layout(NamedTuple):
    """What a kernel's source depends on besides the config: the kind, A's load width
    (8: vec4<u32> loads of 8 halves, 1: single halves), the result type, a bias, and (wide
    members only) whether B's gathered halves are packed 8 to a 16-byte store too."""

    kind: str
    vec_a: int
    out: str          # "f16", or "f32" (the weight gradient's split partials)
    bias: bool
    pack_b: bool = True   # wide members: B's tile of vec4<u32> too (False: only A's is wide)


def workgroup_bytes(c: SgConfig) -> int:
    """Workgroup memory of config c: one or two stages (c.single) of each operand tile (B's
    in the larger of its two layouts where wide), the result scratch, the k table (a slot
    per stage) and the column table."""
    stages = 1 if c.single else 2
    a = c.bm * (c.tk + _PAD)
    b = max(c.tk * (c.bn + _PAD), c.bn * (c.tk + _PAD)) if c.wide else c.tk * (c.bn + _PAD)
    return stages * 2 * (a + b) + 4 * c.wm * c.wn * c.m0 * c.n0 + 16 * stages * c.tk + 16 * c.bn


def candidates(configs, sg: int, max_invocations: int = 1024, max_workgroup_bytes: int = 49152) -> list[SgConfig]:
    """The family members for the adapter's f16 x f16 -> f32 matrix configs (dicts with
    M, N, K) and subgroup size sg."""
    found = []
    for cfg in configs:
        m0, n0, k0 = int(cfg["M"]), int(cfg["N"]), int(cfg["K"])
        for wm, wn, tm, tn, tk in SHAPES:
            for wide, single in FORMS.values():
                c = SgConfig(m0, n0, k0, sg, wm, wn, tm, tn, tk, wide=wide, single=single)
                if (c.threads <= max_invocations and workgroup_bytes(c) <= max_workgroup_bytes
                        and tk % k0 == 0 and tk % 8 == 0 and sg % n0 == 0 and c not in found):
                    found.append(c)
    return found


def _copy(name: str, reg: str, rows: int, cols: int, threads: int, fast_rows: bool, vec: int,
          fetch_one, valid, looped: bool = False, wide: bool = False) -> tuple[list[str], list[str], int]:
    """Lines that fetch a rows x cols operand tile into registers, lines that stash them in
    workgroup array `name` (rows of cols + _PAD halves, at `stage`, in halves), and the
    register count. Element (r, c) of the tile: `fetch_one(r, c)` the WGSL expression of its
    value (a vec4<u32> of 8 halves c..c+7 when vec is 8), `valid(r, c)` the condition to read it.
    fast_rows: neighbouring threads take neighbouring rows (else columns).
    wide: `name` is an array of vec4<u32> (16-byte units) and each thread takes 8 halves of a
    row at a time, stored at once: one vec4<u32> load where vec is 8, else 8 single halves
    (each with its own bounds check) packed by bitcasts.
    Thread li's u-th unit is e = li + u*threads, one block per u with registers reg<u>;
    looped: a loop over u with the registers in an array reg[u] instead (the same indices;
    generate's emulated form, which lavapipe compiles in seconds rather than minutes)."""
    unit = 8 if vec == 8 or wide else 1    # halves per register
    per_row = cols // unit
    units = rows * per_row
    per = -(-units // threads)
    zero = "vec4<u32>(0u)" if unit == 8 else "0.0h"
    fetch, stash = [], []
    for u in (["u"] if looped else range(per)):
        ragged = units % threads != 0 and (looped or u == per - 1)
        at = f"{reg}[u]" if looped else f"{reg}{u}"
        pos = ["{", f"  let e = li + u * {threads}u;" if looped else f"  let e = li + {u * threads}u;"]
        if fast_rows:
            pos += [f"  let r = e % {rows}u;", f"  let c = (e / {rows}u) * {unit}u;"]
        else:
            pos += [f"  let r = e / {per_row}u;", f"  let c = (e % {per_row}u) * {unit}u;"]
        first = f"e < {units}u && " if ragged else ""   # the last round of a ragged split
        if unit == vec:
            fetch += pos + [f"  {at} = {zero};", f"  if ({first}{valid('r', 'c')}) {{ {at} = {fetch_one('r', 'c')}; }}"]
        else:   # 8 single halves, packed two to a u32
            fetch += pos
            for i in range(8):
                col = f"(c + {i}u)"
                fetch += [f"  var h{i} = 0.0h;", f"  if ({first}{valid('r', col)}) {{ h{i} = {fetch_one('r', col)}; }}"]
            fetch.append(f"  {at} = vec4<u32>(" + ", ".join(f"bitcast<u32>(vec2<f16>(h{2 * w}, h{2 * w + 1}))"
                                                            for w in range(4)) + ");")
        fetch.append("}")
        stash += pos
        if ragged:
            stash.append(f"  if (e < {units}u) {{")
        stash.append(f"  let s = stage + r * {cols + _PAD}u + c;")
        stash += stash_unit(name, at, wide, vec)
        if ragged:
            stash.append("  }")
        stash.append("}")
    if looped:
        fetch = [f"for (var u = 0u; u < {per}u; u++) "] + fetch
        stash = [f"for (var u = 0u; u < {per}u; u++) "] + stash
        fetch[0:2] = [fetch[0] + fetch[1]]
        stash[0:2] = [stash[0] + stash[1]]
    return fetch, stash, per


# Per kind: which operand axis neighbouring threads walk (contiguous in memory there).
_A_FAST_ROWS = {"conv2d": False, "transpose": True, "grad_weight": False}
_B_FAST_ROWS = {"conv2d": False, "transpose": False, "grad_weight": True}
_KIND_FILE = {"conv2d": "conv_sgmat_conv2d.wgsl", "transpose": "conv_sgmat_transpose.wgsl",
              "grad_weight": "conv_sgmat_grad_weight.wgsl"}


@functools.lru_cache(maxsize=None)
def generate(config: SgConfig, lay: Layout, emulate: bool = False) -> str:
    """The WGSL of `config` for layout `lay` (bindings: 0 the uniform block, 1 A, 2 the
    image B, [3 the bias,] then the output).

    emulate: the same kernel with each subgroup-matrix load, multiply-accumulate and store
    written as scalar loops over workgroup memory (lane l of subgroup s = thread 32s + l
    holds result elements l, l + sg, ...), so that adapters without matrix units (lavapipe
    in CI) run every index of the real kernel; for tests, slow."""
    if lay.kind not in KINDS:
        raise ValueError(f"conv_sgmat: kind must be one of {KINDS}, got {lay.kind!r}")
    c = config
    bm, bn, tk, nt = c.bm, c.bn, c.tk, c.threads
    nst = 1 if c.single else 2                  # stages of workgroup memory (and of the k table)
    a_wide, b_wide = c.wide, c.wide and lay.pack_b
    # B's tile as stored: [k][n] (rows of bn + _PAD halves), or, packed where threads walk n
    # (conv2d, transpose), [n][k], so that a thread's 8 halves are 8 k of one column while
    # neighbouring threads still gather neighbouring columns; read with col_major loads.
    b_trans = b_wide and not _B_FAST_ROWS[lay.kind]
    b_rows, b_cols = (bn, tk) if b_trans else (tk, bn)
    a_size, b_size = bm * (tk + _PAD), b_rows * (b_cols + _PAD)
    a_ty = "vec4<u32>" if lay.vec_a == 8 else "f16"
    if emulate:
        L = ["enable f16;"]
    else:
        L = ["diagnostic(off, chromium.subgroup_matrix_uniformity);", "enable f16;", "enable subgroups;",
             "enable chromium_experimental_subgroup_matrix;"]
    L += [PARAMS.wgsl(), "@group(0) @binding(0) var<uniform> P: Params;",
         f"@group(0) @binding(1) var<storage, read> A: array<{a_ty}>;",
         "@group(0) @binding(2) var<storage, read> B: array<f16>;"]
    out_binding = 3
    if lay.bias:
        L.append("@group(0) @binding(3) var<storage, read> Bias: array<f16>;")
        out_binding = 4
    L.append(f"@group(0) @binding({out_binding}) var<storage, read_write> C: array<{lay.out}>;")
    if not emulate:
        L += [f"alias LM = subgroup_matrix_left<f16, {c.k0}, {c.m0}>;",
              f"alias RM = subgroup_matrix_right<f16, {c.n0}, {c.k0}>;",
              f"alias AM = subgroup_matrix_result<f32, {c.n0}, {c.m0}>;"]

    def tile_array(name, size, wide):
        return (f"var<workgroup> {name}: array<vec4<u32>, {nst * size // 8}>;" if wide
                else f"var<workgroup> {name}: array<f16, {nst * size}>;")

    L += [f"const OUT_OF_RANGE: i32 = {_OUT_OF_RANGE};",
          tile_array("sA", a_size, a_wide), tile_array("sB", b_size, b_wide),
          f"var<workgroup> sC: array<f32, {c.wm * c.wn * c.m0 * c.n0}>;",
          f"var<workgroup> k_table: array<vec4<i32>, {nst * tk}>;",
          f"var<workgroup> col_table: array<vec4<i32>, {bn}>;"]
    if emulate:   # the emulated matrix loads read a tile's half i
        for name, wide in (("sA", a_wide), ("sB", b_wide)):
            body = (f"return bitcast<vec2<f16>>({name}[i / 8u][(i % 8u) / 2u])[i % 2u];" if wide
                    else f"return {name}[i];")
            L.append(f"fn {name}_half(i: u32) -> f16 {{ {body} }}")
    L += [load_shader(_KIND_FILE[lay.kind]), f"@compute @workgroup_size({nt})"]
    L += entry_point(c.sg, emulate)
    L += [
          f"  let wrow = wg.y * {bm}u;",
          f"  let wcol = wg.x * {bn}u;",
          "  let g = wg.z % P.groups;",
          "  let split = wg.z / P.groups;",
          "  let m_rows = gemm_m();",
          "  let k_begin = split * P.k_per_split;",
          "  let k_end = min(k_begin + P.k_per_split, gemm_k());",
          f"  let steps = (k_end - k_begin + {tk - 1}u) / {tk}u;",
          f"  let sgm = sgid % {c.wm}u;",
          f"  let sgn = sgid / {c.wm}u;",
          f"  for (var j = li; j < {bn}u; j += {nt}u) {{",
          "    let n = wcol + j;",
          "    var col = column(g, min(n, gemm_n() - 1u));",
          "    if (n >= gemm_n()) { col.y = OUT_OF_RANGE; }",
          "    col_table[j] = col;",
          "  }"]

    def k_entries(slot: str, first: str) -> list[str]:
        """Lines that fill k-table slot `slot` with the entries of k = first + kk."""
        return [f"if (li < {tk}u) {{",
                f"  let k = {first} + li;",
                "  var entry = decode_k(g, min(k, gemm_k() - 1u));",
                "  if (k >= k_end) { entry.y = OUT_OF_RANGE; }",
                f"  k_table[{slot} + li] = entry;",
                "}"]

    # A[m, k] (k = k0 + c), its k entry from the slot of the step being fetched.
    a_fetch = (lambda r, col: f"A[a_index(g, wrow + {r}, k0 + {col}, k_table[kslot + {col}]) / 8u]") \
        if lay.vec_a == 8 else (lambda r, col: f"A[a_index(g, wrow + {r}, k0 + {col}, k_table[kslot + {col}])]")
    fa, sa, ra = _copy("sA", "ra", bm, tk, nt, _A_FAST_ROWS[lay.kind], lay.vec_a, a_fetch,
                       lambda r, col: f"wrow + {r} < m_rows && k0 + {col} < k_end", emulate, a_wide)

    def b_fetch(k, n):      # B[k, n] (k = k0 + the tile's row k)
        return f"B[u32(col_table[{n}].x + k_table[kslot + {k}].x)]"

    def b_valid(k, n):
        return (f"u32(col_table[{n}].y + k_table[kslot + {k}].y) < P.in_h && "
                f"u32(col_table[{n}].z + k_table[kslot + {k}].z) < P.in_w")

    if b_trans:
        fb, sb, rb = _copy("sB", "rb", bn, tk, nt, True, 1, lambda r, col: b_fetch(col, r),
                           lambda r, col: b_valid(col, r), emulate, True)
    else:
        fb, sb, rb = _copy("sB", "rb", tk, bn, nt, _B_FAST_ROWS[lay.kind], 1, b_fetch, b_valid, emulate, b_wide)
    ra_ty = "vec4<u32>" if lay.vec_a == 8 or a_wide else "f16"
    rb_ty = "vec4<u32>" if b_wide else "f16"
    if emulate:
        L += [f"  var ra: array<{ra_ty}, {ra}>;", f"  var rb: array<{rb_ty}, {rb}>;"]
    else:
        L += [f"  var ra{u}: {ra_ty};" for u in range(ra)] + [f"  var rb{u}: {rb_ty};" for u in range(rb)]
    per_lane = c.m0 * c.n0 // c.sg
    if emulate:
        L.append(f"  var acc: array<f32, {c.tm * c.tn * per_lane}>;")
    else:
        L += [f"  var acc{i}_{j} = AM();" for i in range(c.tm) for j in range(c.tn)]

    def block(lines, depth):
        return ["  " * depth + x for x in lines]

    def stash(stage_a, stage_b):
        return (["{", f"  let stage = {stage_a};"] + ["  " + x for x in sa] + ["}",
                 "{", f"  let stage = {stage_b};"] + ["  " + x for x in sb] + ["}"])

    if c.single:
        # One stage: fetch, stash, barrier, multiply, barrier. The one k-table slot holds the
        # step being fetched; the next step's entries are written between the two barriers,
        # after every read of this step's (the fetches) and before the barrier that precedes
        # the next fetch.
        L += block(k_entries("0u", "k_begin"), 1) + ["  workgroupBarrier();", "  let kslot = 0u;"]
        L += ["  for (var t = 0u; t < steps; t++) {",
              f"    let k0 = k_begin + t * {tk}u;"] + block(fa + fb, 2) + block(stash("0u", "0u"), 2)
        L += ["    workgroupBarrier();"] + block(k_entries("0u", f"k0 + {tk}u"), 2)
        L += ["    let a_off = 0u;", "    let b_off = 0u;"]
    else:
        # Prologue: step 0's table, barrier, its loads; step 1's table; stash; barrier.
        L += block(k_entries("0u", "k_begin"), 1) + ["  workgroupBarrier();",
                                                      "  var k0 = k_begin;", "  var kslot = 0u;"]
        L += block(fa + fb, 1) + block(k_entries(f"{tk}u", f"k_begin + {tk}u"), 1)
        L += block(stash("0u", "0u"), 1) + ["  workgroupBarrier();"]
        L += ["  for (var t = 0u; t < steps; t++) {",
              "    let cur = t % 2u;",
              f"    k0 = k_begin + (t + 1u) * {tk}u;",
              f"    kslot = (1u - cur) * {tk}u;",
              "    let more = t + 1u < steps;",
              "    if (more) {"] + block(fa + fb, 3) + ["    }",
              f"    let a_off = cur * {a_size}u;",
              f"    let b_off = cur * {b_size}u;"]
    a_pitch, b_pitch = tk + _PAD, b_cols + _PAD
    # The emulated lane's elements of each m0 x n0 result (row-major) are those the store
    # below reads back, e = (lane / n0 + q * sg/n0) * n0 + lane % n0: its scratch round trip
    # stays in the lane and needs no barrier (lavapipe compiles each barrier slowly). Loops,
    # not unrolled: lavapipe's compiler took 80 s over the unrolled form of a small config.
    rows_per_pass = c.sg // c.n0
    if emulate:
        # B[k, n] of the tile at bj: [k][n] rows, or [n][k] rows where b_trans
        b_k, b_n = (1, b_pitch) if b_trans else (b_pitch, 1)
        L += [f"    for (var ks = 0u; ks < {tk // c.k0}u; ks++) {{",
              f"      for (var ij = 0u; ij < {c.tm * c.tn}u; ij++) {{",
              f"        let ai = a_off + (sgm * {c.tm * c.m0}u + (ij / {c.tn}u) * {c.m0}u) * {a_pitch}u + ks * {c.k0}u;",
              f"        let bj = b_off + ks * {c.k0 * b_k}u + (sgn * {c.tn * c.n0}u + (ij % {c.tn}u) * {c.n0}u) * {b_n}u;",
              f"        for (var q = 0u; q < {per_lane}u; q++) {{",
              f"          let e = (lane / {c.n0}u + q * {rows_per_pass}u) * {c.n0}u + lane % {c.n0}u;",
              "          var s = 0.0;",
              f"          for (var kk = 0u; kk < {c.k0}u; kk++) {{",
              f"            s += f32(sA_half(ai + (e / {c.n0}u) * {a_pitch}u + kk)) * "
              f"f32(sB_half(bj + kk * {b_k}u + (e % {c.n0}u) * {b_n}u));",
              "          }",
              f"          acc[ij * {per_lane}u + q] += s;",
              "        }",
              "      }",
              "    }"]

    def load_args(arr, off, pitch, wide):
        # every offset and pitch is a multiple of 8 halves, so exact in 16-byte units (Tint
        # counts both in the array's elements)
        return f"&{arr}, ({off}) / 8u, {pitch // 8}u" if wide else f"&{arr}, {off}, {pitch}u"

    for kk in range(0, tk, c.k0) if not emulate else ():
        L.append("    {")
        for i in range(c.tm):
            off = f"a_off + (sgm * {c.tm * c.m0}u + {i * c.m0}u) * {a_pitch}u + {kk}u"
            L.append(f"      let a{i} = subgroupMatrixLoad<LM, row_major>({load_args('sA', off, a_pitch, a_wide)});")
        for j in range(c.tn):
            if b_trans:   # sB[n][k]
                off = f"b_off + (sgn * {c.tn * c.n0}u + {j * c.n0}u) * {b_pitch}u + {kk}u"
                L.append(f"      let b{j} = subgroupMatrixLoad<RM, col_major>({load_args('sB', off, b_pitch, True)});")
            else:         # sB[k][n]
                off = f"b_off + {kk * b_pitch}u + sgn * {c.tn * c.n0}u + {j * c.n0}u"
                L.append(f"      let b{j} = subgroupMatrixLoad<RM, row_major>({load_args('sB', off, b_pitch, b_wide)});")
        for i in range(c.tm):
            for j in range(c.tn):
                L.append(f"      acc{i}_{j} = subgroupMatrixMultiplyAccumulate(a{i}, b{j}, acc{i}_{j});")
        L.append("    }")
    if not c.single:
        # Step t+2's k table goes to the slot step t's loads used (read before the last barrier).
        L += ["    if (more) {"] + block(stash(f"(1u - cur) * {a_size}u", f"(1u - cur) * {b_size}u"), 3) + ["    }"]
        L += block(k_entries(f"cur * {tk}u", f"k_begin + (t + 2u) * {tk}u"), 2)
    L += ["    workgroupBarrier();", "  }"]
    # The store: lane c of a result matrix writes its column c, rows sg/n0 apart.
    tile = c.m0 * c.n0
    L += [f"  let row0 = wrow + sgm * {c.tm * c.m0}u;",
          f"  let col0 = wcol + sgn * {c.tn * c.n0}u;",
          f"  let scratch = sgid * {tile}u;",
          "  let row_stride = out_row_stride();",
          f"  let lane_col = lane % {c.n0}u;",
          f"  let lane_row = lane / {c.n0}u;"]
    for j in range(c.tn):
        L += [f"  let n{j} = col0 + {j * c.n0}u + lane_col;",
              f"  let o{j} = out_col(g, split, min(n{j}, gemm_n() - 1u));"]
    for i in range(c.tm):
        for j in range(c.tn):
            if emulate:
                L.append(f"  for (var q = 0u; q < {per_lane}u; q++) {{ sC[scratch + (lane_row + q * "
                         f"{rows_per_pass}u) * {c.n0}u + lane_col] = acc[{(i * c.tn + j) * per_lane}u + q]; }}")
            else:
                L += [f"  subgroupMatrixStore<row_major>(&sC, scratch, acc{i}_{j}, {c.n0}u);", "  workgroupBarrier();"]
            L += [f"  for (var q = 0u; q < {c.m0 // rows_per_pass}u; q++) {{",
                  f"    let rr = lane_row + q * {rows_per_pass}u;",
                  f"    let m = row0 + {i * c.m0}u + rr;",
                  f"    if (m < m_rows && n{j} < gemm_n()) {{",
                  f"      var v = sC[scratch + rr * {c.n0}u + lane_col];"]
            if lay.bias:
                L.append("      v += f32(Bias[g * m_rows + m]);")
            L += [f"      C[o{j} + m * row_stride] = {lay.out}(v);",
                  "    }",
                  "  }"]
            if not emulate:
                L.append("  workgroupBarrier();")
    L.append("}")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------- choosing

def available(dev) -> bool:
    """Whether `dev` runs f16 convolutions on matrix units: f16 subgroup matrices that
    passed the runtime's check, matmul's family not turned off (ANYGPU_MATRIX_UNITS=0 or a
    failed kernel) and this family not turned off (ANYGPU_CONV_MATRIX_UNITS=0, a failure)."""
    from . import sgmat
    if getattr(dev, "_conv_sgmat_off", False) or sgmat.choose(dev) is None:
        return False
    return os.environ.get("ANYGPU_CONV_MATRIX_UNITS", "1").strip().lower() not in ("0", "false", "off", "no")


def _members(dev) -> list[SgConfig]:
    found = getattr(dev, "_conv_sgmat_members", None)
    if found is None:
        configs, sg = f16_configs(dev)
        limits = getattr(dev, "limits", {}) or {}
        found = candidates(configs, sg, int(limits.get("max-compute-invocations-per-workgroup", 256)),
                           int(limits.get("max-compute-workgroup-storage-size", 16384)))
        # 16x16 matrices first: the 16x8 configs trail them by a third (ops/sgmat.py, measured)
        found.sort(key=lambda c: -c.n0)
        dev._conv_sgmat_members = found
    return found


# Workgroups that keep a large GPU busy (an H200 has 132 multiprocessors, two workgroups
# each): fewer take as long as this many would.
_BUSY_WORKGROUPS = 264


def choose(dev, rows: int, cols: int, copies: int = 1, depth: int = 0) -> SgConfig:
    """The config of a GEMM of `rows` x `cols` outputs (per group) and reduction `depth`
    (0: unknown) on dev, run `copies` times side by side (groups, splits): the shape the size heuristic below picks, in form
    ANYGPU_CONV_SGMAT_FORM (a key of FORMS, default DEFAULT_FORM "v_s": wide tiles, one
    stage) where the shape has that form within the adapter's limits, else its first form.
    ANYGPU_CONV_SGMAT_CONFIG=<name> overrides both.

    Size heuristic: a workgroup's time goes mostly into staging BM + BN values per k, and
    fewer than _BUSY_WORKGROUPS workgroups take as long as that many, so the cost of a tile
    is max(workgroups, _BUSY_WORKGROUPS) * (BM + BN); ties go to less padded work, then to
    fewer padded k (a stem's 27 in a k step of 32, not 64), the longer k step and more
    threads. To be measured and tuned on the H200
    (benchmarks/conv_sgmat.py --sweep)."""
    members = _members(dev)
    if not members:
        raise ValueError("conv_sgmat: this device has no f16 subgroup-matrix configs")
    wanted = os.environ.get("ANYGPU_CONV_SGMAT_CONFIG", "").strip()
    if wanted:
        config = SgConfig.parse(wanted)
        if config not in members:
            raise ValueError(f"ANYGPU_CONV_SGMAT_CONFIG: {wanted} is not one of this adapter's {len(members)} "
                             f"conv family members ({', '.join(c.name for c in members[:6])}, ...)")
        return config
    form = os.environ.get("ANYGPU_CONV_SGMAT_FORM", "").strip() or DEFAULT_FORM
    if form not in FORMS:
        raise ValueError(f"ANYGPU_CONV_SGMAT_FORM: {form!r} is not one of {', '.join(FORMS)}")

    def shape(c):
        return c._replace(wide=False, epi=False, single=False)
    pool = list(dict.fromkeys(shape(c) for c in members if c.n0 == members[0].n0))

    def cost(c):
        workgroups = -(-rows // c.bm) * -(-cols // c.bn) * copies
        return (max(workgroups, _BUSY_WORKGROUPS) * (c.bm + c.bn), workgroups * c.bm * c.bn,
                -(-depth // c.tk) * c.tk, -c.tk, -c.threads)
    best = min(pool, key=cost)
    forms = [c for c in members if shape(c) == best]
    return next((c for c in forms if (c.wide, c.single) == FORMS[form]), forms[0])


def forget(dev, reason: str) -> None:
    """Stop running convolutions on matrix units on `dev` (a kernel failed): they go back to
    the f32 kernels on converted operands; say so once."""
    dev._conv_sgmat_off = True
    warnings.warn(f"anygpu: matrix-unit convolutions disabled on this device: {reason}", RuntimeWarning,
                  stacklevel=3)


# --------------------------------------------------------------------------- launching

def _vec_a(kind: str, shape: tuple, k_per_split: int) -> int:
    """8 where every 8-run of A's k at a multiple of 8 is 8 aligned halves in memory."""
    batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, groups = shape
    if kind == "conv2d":
        return 8 if ((in_c // groups) * kh * kw) % 8 == 0 else 1
    if kind == "grad_weight":
        return 8 if (out_h * out_w) % 8 == 0 and k_per_split % 8 == 0 else 1
    return 1


def _pack_b() -> bool:
    """Whether wide members pack B's halves into 16-byte stores (ANYGPU_CONV_SGMAT_PACK_B,
    default 1; 0: only A's tile is wide, B's stays single halves), to measure the two."""
    return os.environ.get("ANYGPU_CONV_SGMAT_PACK_B", "1").strip().lower() not in ("0", "false", "off", "no")


def _kernel(dev, config: SgConfig, lay: Layout):
    """The compiled kernel; emulated (see generate) where a test set dev._conv_sgmat_emulate."""
    inputs = 3 if lay.bias else 2
    emulate = bool(getattr(dev, "_conv_sgmat_emulate", False))
    lay = lay._replace(pack_b=config.wide and lay.pack_b)    # the same source for plain members
    name = (f"conv_sgmat_{lay.kind}_{config.name}_a{lay.vec_a}_{lay.out}" + ("_bias" if lay.bias else "")
            + ("_pb" if lay.pack_b else ""))
    return dev.kernel(name + ("_emulated" if emulate else ""), generate(config, lay, emulate), inputs, 1,
                      PARAMS.format())


def _block(shape: tuple, stride, padding, dilation, has_bias: bool, k_per_split: int, phase: tuple = ()) -> tuple:
    batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, groups = shape
    return (batch, in_c, in_h, in_w, out_c, out_h, out_w, groups, kh, kw, *stride, *padding, *dilation,
            int(has_bias), k_per_split, *(phase or (0,) * 10))


def _grid(dev, rows: int, cols: int, config: SgConfig, depth: int) -> tuple[int, int, int]:
    from ..runtime import LimitError
    grid = (-(-cols // config.bn), -(-rows // config.bm), depth)
    if max(grid) > 65535:
        raise LimitError(f"conv_sgmat: a grid of {grid} workgroups is over 65535 in one dimension")
    return grid


def conv2d(dev, input, weight, bias, shape: tuple, stride, padding, dilation, out, config=None) -> None:
    """Record conv2d of f16 Buffers (arguments checked by ops/conv.py) into f16 `out`.
    shape: (batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, groups)."""
    batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, groups = shape
    rows, cols = out_c // groups, batch * out_h * out_w
    depth = (in_c // groups) * kh * kw
    config = config or choose(dev, rows, cols, groups, depth)
    lay = Layout("conv2d", _vec_a("conv2d", shape, depth), "f16", bias is not None, _pack_b())
    inputs = [weight, input] + ([bias] if bias is not None else [])
    dev.launch(_kernel(dev, config, lay), inputs, [out],
               _block(shape, stride, padding, dilation, bias is not None, depth),
               _grid(dev, rows, cols, config, groups))


def conv_transpose2d(dev, input, weight, bias, shape: tuple, stride, padding, dilation, out, config=None) -> None:
    """Record conv_transpose2d of f16 Buffers (bias: one per output channel, or None;
    arguments checked by ops/conv.py) into f16 `out`, one launch per output phase
    (oh mod stride_h, ow mod stride_w).
    shape: (batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, groups) of the transposed
    convolution; weight [in_c, out_c/groups, kh, kw]. Phases no tap reaches are zero-filled."""
    batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, groups = shape
    rows = out_c // groups
    first_cols = batch * -(-out_h // stride[0]) * -(-out_w // stride[1])
    config = config or choose(dev, rows, first_cols, groups,
                              (in_c // groups) * -(-kh // stride[0]) * -(-kw // stride[1]))
    kernel = _kernel(dev, config, Layout("transpose", 1, "f16", bias is not None, _pack_b()))
    inputs = [weight, input] + ([bias] if bias is not None else [])
    for phase_h, phase_w, phase_rows, phase_cols, taps_h, taps_w in output_phases(
            out_h, out_w, kh, kw, stride, padding, dilation):
        depth = (in_c // groups) * taps_h[2] * taps_w[2]
        # A phase no tap reaches (kernel smaller than the stride) sums nothing: the GEMM
        # runs with k = 0 steps and stores zeros.
        phase = (phase_h, phase_w, phase_rows, phase_cols, *taps_h, *taps_w)
        dev.launch(kernel, inputs, [out],
                   _block(shape, stride, padding, dilation, bias is not None, max(depth, 1), phase),
                   _grid(dev, rows, batch * phase_rows * phase_cols, config, groups))


# conv2d_grad_weight splits its long reduction until about this many workgroups run, in
# ranges of at least this many k (a multiple of the config's TK), into at most this many
# f32 partial sums.
_GRAD_WEIGHT_WORKGROUPS = 512
_GRAD_WEIGHT_MIN_SPLIT = 512
_GRAD_WEIGHT_MAX_PARTIAL = 1 << 24


def grad_weight_splits(rows: int, cols: int, depth: int, groups: int, config: SgConfig) -> tuple[int, int]:
    """(splits, k_per_split) of a weight gradient: rows x cols outputs per group, depth k."""
    tiles = -(-rows // config.bm) * -(-cols // config.bn) * groups
    splits = max(1, min(-(-depth // _GRAD_WEIGHT_MIN_SPLIT), -(-_GRAD_WEIGHT_WORKGROUPS // tiles),
                        _GRAD_WEIGHT_MAX_PARTIAL // (rows * groups * cols)))
    k_per_split = -(-depth // splits)
    k_per_split = -(-k_per_split // config.tk) * config.tk
    return -(-depth // k_per_split), k_per_split


def conv2d_grad_weight(dev, input, grad_out, shape: tuple, stride, padding, dilation, config=None):
    """conv2d's weight gradient of f16 Buffers (arguments checked by ops/conv.py) ->
    f16 [out_c, in_c/groups, kh, kw]: f32 split partials summed into f16 (one launch
    each), or the f16 result at once when one split covers the reduction."""
    batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw, groups = shape
    rows, cols, depth = out_c // groups, (in_c // groups) * kh * kw, batch * out_h * out_w
    config = config or choose(dev, rows, cols, groups * max(1, min(depth // _GRAD_WEIGHT_MIN_SPLIT, 64)))
    splits, k_per_split = grad_weight_splits(rows, cols, depth, groups, config)
    n = out_c * cols
    lay = Layout("grad_weight", _vec_a("grad_weight", shape, k_per_split), "f16" if splits == 1 else "f32", False,
                 _pack_b())
    target = dev.empty(splits * n, lay.out)
    dev.launch(_kernel(dev, config, lay), [grad_out, input], [target],
               _block(shape, stride, padding, dilation, False, k_per_split),
               _grid(dev, rows, cols, config, groups * splits))
    if splits == 1:
        return target
    return sum_splits(dev, target, splits, n, "f16")
